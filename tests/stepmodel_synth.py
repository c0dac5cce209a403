"""Synthetic runs whose step follows the step model's laws (ddpbench.stepmodel), with known answers:
compute, communication and exposure per stated laws and small run-to-run noise, for the step model's
tests (tests/unit/test_stepmodel.py) and the report's Predictions section (test_report_predictions.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.stepmodel.schedule import overlap_share
from ddpbench.strategies import comm_volume_factor, strategy_traits

K, THETA, GAMMA, BACKWARD = 2e-4, 0.8, 0.06, 0.6  # compute = K b^θ r_s (1 + γ (p−1)); backward's share
R = {"single": 1.0, "allreduce": 1.0, "bucketed_allreduce": 1.0, "gather_scatter": 1.02, "ddp": 1.08}
ALPHA, BW = 40e-6, 1.5e9  # seconds per call and hop; bytes/s over loopback
GRAD = 8e6  # bytes of gradient
CALLS = {"allreduce": 8, "gather_scatter": 2}


def true_parts(strategy, p, b, bucket_mb=25.0, bw=BW):
    """(compute, comm, exposed, calls, bytes) per step under the synthetic laws."""
    compute = K * b**THETA * R[strategy] * (1 + GAMMA * (p - 1))
    if p == 1:
        return compute, 0.0, 0.0, 0, 0.0
    law = strategy_traits(strategy).comm_volume
    calls = CALLS.get(strategy) or max(1, round(GRAD / 2**20 / bucket_mb))
    sent = comm_volume_factor(law, p) * GRAD
    comm = ALPHA * calls * (p - 1) + sent / bw
    x = overlap_share(calls, BACKWARD * compute, comm) if strategy == "ddp" else 1.0
    return compute, comm, float(x * comm), calls, sent


def synthetic_runs(cells, repeats=3, sigma=0.01, seed=1, **extra):
    """Runs of (strategy, p, b[, bucket_mb[, link, bps]]) cells with lognormal noise on each part."""
    rng = np.random.default_rng(seed)
    rows = []
    for cell in cells:
        strategy, p, b, bucket, link, bps = (*cell, *(25.0, "none", np.nan)[len(cell) - 3 :])
        bw = BW if not np.isfinite(bps) else 0.9 * bps / 8
        for r in range(repeats):
            compute, comm, exposed, calls, sent = true_parts(strategy, p, b, bucket, bw)
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
