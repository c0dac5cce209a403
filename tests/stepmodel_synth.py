"""Runs whose step follows the step model's laws with known constants (and small run-to-run noise):
what tests/unit/test_stepmodel.py fits and tests/unit/test_predict_verb.py predicts from.

    compute = K b^θ r_s (1 + γ (p − 1)),  comm = α calls (p − 1) + v_s(p) GRAD / B,
    exposed = comm (blocking) or what DDP's buckets leave after backward (schedule.overlap_share)
"""

import numpy as np
import pandas as pd

from ddpbench.core.run_record import Extra, numbers_text
from ddpbench.stepmodel.schedule import overlap_share, resampled, simulated_share
from ddpbench.strategies import comm_volume_factor, strategy_traits

K, THETA, GAMMA, BACKWARD = 2e-4, 0.8, 0.06, 0.6  # compute = K b^θ r_s (1 + γ (p−1)); backward's share
R = {"single": 1.0, "allreduce": 1.0, "bucketed_allreduce": 1.0, "gather_scatter": 1.02, "ddp": 1.08}
ALPHA, BW = 40e-6, 1.5e9  # seconds per call and hop; bytes/s over loopback
GRAD = 8e6  # bytes of gradient
CALLS = {"allreduce": 8, "gather_scatter": 2}


def true_parts(strategy, p, b, bucket_mb=25.0, bw=BW, ready=None):
    """(compute, comm, exposed, calls, bytes) per step under the synthetic laws; `ready`: DDP's buckets
    become ready along that readiness curve (fractions of backward of equal buckets: `ddp_buckets`), else
    evenly."""
    compute = K * b**THETA * R[strategy] * (1 + GAMMA * (p - 1))
    if p == 1:
        return compute, 0.0, 0.0, 0, 0.0
    law = strategy_traits(strategy).comm_volume
    calls = CALLS.get(strategy) or max(1, round(GRAD / 2**20 / bucket_mb))
    sent = comm_volume_factor(law, p) * GRAD
    comm = ALPHA * calls * (p - 1) + sent * (2 if strategy == "gather_scatter" else 1) / bw  # the root: in, then out
    if strategy != "ddp":
        x = 1.0
    elif ready is None:
        x = overlap_share(calls, BACKWARD * compute, comm)
    else:
        x = simulated_share(*ddp_buckets(ready, calls), BACKWARD * compute, comm)
    return compute, comm, float(x * comm), calls, sent


def ddp_buckets(ready, calls):
    """(ready fractions, shares) of `calls` equal buckets along the readiness curve `ready`."""
    return resampled(ready, None, calls)


def synthetic_runs(cells, repeats=3, sigma=0.01, seed=1, ready=None, **extra):
    """Runs of (strategy, p, b[, bucket_mb[, link, bps]]) cells with lognormal noise on each part;
    `ready`: DDP's buckets follow that readiness curve, and its runs record it (extra.bucket_ready)."""
    rng = np.random.default_rng(seed)
    rows = []
    for cell in cells:
        strategy, p, b, bucket, link, bps = (*cell, *(25.0, "none", np.nan)[len(cell) - 3 :])
        bw = BW if not np.isfinite(bps) else 0.9 * bps / 8
        for r in range(repeats):
            compute, comm, exposed, calls, sent = true_parts(strategy, p, b, bucket, bw, ready)
            if ready is not None and strategy == "ddp":
                extra[Extra.bucket_ready] = numbers_text(ddp_buckets(ready, calls)[0])
            else:
                extra.pop(Extra.bucket_ready, None)
            noise = np.exp(rng.normal(0, sigma, 2))
            compute, comm, exposed = compute * noise[0], comm * noise[1], exposed * noise[1]
            step = compute + exposed
            rows.append(dict(status="ok", strategy=strategy, world_size=p, nodes=2 if link != "none" else 1, device="cpu",
                             backend="gloo", model="mlp", batch_size=b * p, per_rank_batch=b, bucket_mb=bucket, link=link,
                             extra_link_achieved_bps=bps, repeat=r, step_time_mean_s=step, frac_exposed_comm=exposed / step,
                             frac_comm=comm / step, frac_backward=BACKWARD * compute / step, comm_calls_per_step=calls,
                             comm_bytes_per_step=sent, samples_per_s=b * p / step, epoch_time_s=step * 10, **extra))  # fmt: skip
    return pd.DataFrame(rows)


STRATEGIES = ("allreduce", "ddp", "gather_scatter")
SCALING = [("single", 1, b) for b in (128, 64, 32, 16)] + [(s, p, 128 // p) for s in STRATEGIES for p in (2, 4)]
