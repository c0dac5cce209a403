"""The step model: a training step's time predicted from measured parts, with an interval, for cells
that were not run (other world sizes, links, bucket sizes, per-rank batches), and checked on cells
that were (held out in turn). No torch: it reads runs.csv and the collective sweep.

    step = compute + exposed communication
    compute(s, p, b) = k · b^θ · r_s · (1 + γ (p − 1))          parts.py's cells, compute.py
    comm(s, p, ℓ)    = φ_s · (α_ℓ · calls · (p − 1) + v_s(p) · M_s / B_ℓ)    comm.py
    exposed          = x · comm, x from the strategy's schedule            schedule.py

`k` the compute at one per-rank batch of a model and setting, θ how it grows with the batch, r_s a
strategy's own compute (DDP's hooks, FSDP's copies), γ how much a rank slows per other rank on the
same machine (memory bandwidth, shared cores): fitted jointly on log step parts, shrunk towards no
effect where the cells cannot tell. α_ℓ and B_ℓ a link's latency per call and bandwidth (the sweep's
when given, else fitted on the runs' own calls, bytes and communication time over that link), φ_s a
strategy's efficiency against that law, v_s its volume law (base.Strategy.comm_volume), M_s its
message size measured as bytes / v_s(p). The schedule (base.Strategy.schedule) says how much of the
communication the step waits for: all of it when blocking, through the root or periodic; for
buckets handed over as backward produces them, what the last bucket and a communication stream
slower than backward leave (simulated over the buckets' recorded ready times where DDP's cells recorded
them, extra.bucket_ready, else buckets ready evenly), corrected by what the strategy's own cells measured.

Intervals: every part is refitted on bootstrap resamples of each measured cell's repeats (the
parts' uncertainty), and widened by the model's own error on held-out cells (holdout.py): a
prediction is no surer than the model has proved.
"""

from ddpbench.stepmodel.holdout import HOLDOUT_COLUMNS, Validation, validate
from ddpbench.stepmodel.model import PREDICTION_COLUMNS, MissingPart, StepModel, fit
from ddpbench.stepmodel.parts import Measured, measure

__all__ = ["HOLDOUT_COLUMNS", "PREDICTION_COLUMNS", "Measured", "MissingPart", "StepModel", "Validation", "fit",
           "measure", "validate"]  # fmt: skip
