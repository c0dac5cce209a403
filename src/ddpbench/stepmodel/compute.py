"""The compute law: what one rank computes per step (data, forward, backward, optimizer, bookkeeping;
everything but the exposed communication) as

    log compute = log k_key + θ · log b + log r_s + log(1 + γ (p − 1))

per device: k_key the compute of one model and setting, b the per-rank batch, r_s the strategy's own
compute (1 for single), γ the slowdown each other rank on the machine adds (memory bandwidth, cores
shared with communication threads). Least squares on the log parts, with weak priors (θ = 1, r_s = 1,
γ = 0) so cells that cannot tell two effects apart split them the simplest way instead of failing.
For a fixed γ the problem is linear, so it is solved for every bootstrap draw at once, on a coarse grid of γ
and then finer around each draw's best.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

PRIOR_WEIGHT = 0.1  # per parameter, in squared log units: the cells' residuals decide where they can
GAMMA_STEP = 0.1
GAMMAS = np.arange(0.0, 4.0 + GAMMA_STEP / 2, GAMMA_STEP)  # slowdown per extra rank: a coarse grid, then ±0.1 finer


@dataclass
class DeviceLaw:
    keys: list[str]
    strategies: list[str]
    log_k: np.ndarray  # [draws, keys]
    theta: np.ndarray  # [draws]
    log_r: np.ndarray  # [draws, strategies]
    gamma: np.ndarray  # [draws]
    batches: dict[str, tuple[float, float]]  # key -> (smallest, largest) per-rank batch measured
    world_sizes: tuple[int, int]


def fit_device(cells: pd.DataFrame, compute: np.ndarray) -> DeviceLaw:
    """The law of one device's cells (`compute` [draws, cells])."""
    keys = sorted(set(cells["compute_key"]))
    strategies = sorted(set(cells["strategy"]) - {"single"})
    nk, ns = len(keys), len(strategies)
    kc = cells["compute_key"].map({k: i for i, k in enumerate(keys)}).to_numpy()
    sc = cells["strategy"].map({s: i for i, s in enumerate(strategies)}).to_numpy()
    logb = np.log(cells["per_rank_batch"].to_numpy(float))
    p = cells["world_size"].to_numpy(float)
    x = np.zeros((len(cells), nk + 1 + ns))
    x[np.arange(len(cells)), kc] = 1.0
    x[:, nk] = logb
    has_s = ~pd.isna(sc)
    x[np.flatnonzero(has_s), nk + 1 + sc[has_s].astype(int)] = 1.0
    w = np.sqrt(PRIOR_WEIGHT)
    prior_rows = np.zeros((1 + ns, x.shape[1]))
    prior_rows[0, nk] = w
    prior_rows[np.arange(1, 1 + ns), nk + 1 + np.arange(ns)] = w
    a = np.vstack([x, prior_rows])
    solve = np.linalg.pinv(a)  # shared by every γ and draw: only the right-hand side changes
    y = np.log(compute)  # [draws, cells]
    prior_rhs = np.zeros(1 + ns)
    prior_rhs[0] = w * 1.0  # θ = 1

    def solve_at(gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(parameters [draws, params], loss [draws]) at one γ per draw."""
        rhs = np.concatenate([y - np.log1p(gamma[:, None] * (p - 1)[None, :]),
                              np.broadcast_to(prior_rhs, (len(gamma), 1 + ns))], axis=1)  # fmt: skip
        beta = rhs @ solve.T
        return beta, ((rhs - beta @ a.T) ** 2).sum(axis=1) + PRIOR_WEIGHT * gamma**2

    # γ on a coarse grid, then around each draw's best: memory grows with draws × cells only
    best = np.zeros(len(y))
    chosen, loss = solve_at(best)
    for step, grid in ((None, GAMMAS), (GAMMA_STEP, np.linspace(-GAMMA_STEP, GAMMA_STEP, 21))):
        start = best.copy()
        for g in grid:
            gamma = np.full(len(y), g) if step is None else np.clip(start + g, 0.0, GAMMAS[-1])
            beta, got = solve_at(gamma)
            better = got < loss
            chosen[better], loss[better], best[better] = beta[better], got[better], gamma[better]
    batches = {k: (float(np.exp(logb[kc == i]).min()), float(np.exp(logb[kc == i]).max())) for i, k in enumerate(keys)}
    return DeviceLaw(keys, strategies, chosen[:, :nk], chosen[:, nk], chosen[:, nk + 1:], best,
                     batches, (int(p.min()), int(p.max())))  # fmt: skip


def predict(law: DeviceLaw, key: str, strategy: str, batch: float, world: int) -> np.ndarray:
    """Compute per step [draws] for one target cell (the key must be among the law's)."""
    log_k = law.log_k[:, law.keys.index(key)]
    log_r = law.log_r[:, law.strategies.index(strategy)] if strategy in law.strategies else 0.0
    return np.exp(log_k + law.theta * np.log(batch) + log_r + np.log1p(law.gamma * (world - 1)))
