"""How much of a step's communication the step waits for: x = exposed / comm, from the strategy's
schedule (base.Strategy.schedule).

- blocking, root, periodic: all of it (the ranks wait for each call; through the root the busiest
  rank's bytes already carry the p − 1 messages; periodic per step is its average over the period).
- overlap: n equal buckets handed to one communication stream as backward produces them, evenly over
  the backward time W: each bucket's call takes comm/n; the stream keeps up when comm/n <= W/n and
  then only the last bucket is exposed, else it falls behind and the step waits for the backlog:
      x = max(1/n, 1 − W (n − 1) / (n · comm))
  corrected by δ_s, the mean difference the strategy's own cells measured (hooks that block, such as
  PowerSGD's on gloo, buckets that are not even), shrunk towards 0.
- prefetch (FSDP): on CPU (gloo) its collectives hold the training thread: all exposed; on CUDA the
  same law as overlap over the whole computation.
- none: no communication. stages (a pipeline) is not modelled: its step is a schedule of micro-batches.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.stepmodel.comm import MissingPart

SHRINK = 1.0


def overlap_share(n, window, comm) -> np.ndarray:
    """The exposed share of `comm` for `n` even buckets over a backward of `window` seconds."""
    n = np.maximum(np.asarray(n, float), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.maximum(1 / n, 1 - np.asarray(window, float) * (n - 1) / (n * np.asarray(comm, float)))
    return np.clip(np.where(np.asarray(comm) > 0, x, 0.0), 0.0, 1.0)


def modelled_share(schedule: str, device: str, calls, compute, backward, comm) -> np.ndarray:
    """x before the strategy's own correction."""
    if schedule == "none":
        return np.zeros_like(np.asarray(comm, float))
    if schedule == "stages":
        raise MissingPart("the pipeline's schedule (micro-batches through stages) is not modelled")
    if schedule == "overlap":
        return overlap_share(calls, backward, comm)
    if schedule == "prefetch" and str(device).startswith("cuda"):
        return overlap_share(calls, compute, comm)
    return np.ones_like(np.asarray(comm, float))


def corrections(cells: pd.DataFrame, draws: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """δ_s [draws] per strategy whose schedule is modelled, from its cells that communicated."""
    out = {}
    talk = draws["comm"][0] > 0
    for s, g in cells[talk].groupby("strategy"):
        if g["schedule"].iloc[0] not in ("overlap", "prefetch"):
            continue
        ix = g.index.to_numpy()
        comm, exposed = draws["comm"][:, ix], draws["exposed"][:, ix]
        devices = g["device"] if "device" in g else pd.Series("cpu", index=g.index)
        sim = np.column_stack([modelled_share(g["schedule"].iloc[0], d, n, draws["compute"][:, i], draws["backward"][:, i],
                                              comm[:, j]) for j, (i, d, n) in enumerate(zip(ix, devices, g["calls"]))])  # fmt: skip
        with np.errstate(divide="ignore", invalid="ignore"):
            diff = np.where(comm > 0, np.minimum(exposed / comm, 1.0) - sim, 0.0)
        out[s] = diff.sum(axis=1) / (diff.shape[1] + SHRINK)
    return out


def backward_share(cells: pd.DataFrame, draws: dict[str, np.ndarray], target: pd.Series) -> np.ndarray:
    """Backward's share of the compute [draws]: the strategy's own cells of the same compute, else any
    cells of that compute."""
    for same in (cells["compute_key"].eq(target["compute_key"]) & cells["strategy"].eq(target["strategy"]),
                 cells["compute_key"].eq(target["compute_key"])):  # fmt: skip
        ix = np.flatnonzero(same.to_numpy())
        share = draws["backward"][:, ix] / draws["compute"][:, ix]
        share = np.where(np.isfinite(share), share, np.nan)
        if len(ix) and np.isfinite(share).any():
            return np.nanmean(share, axis=1)
    return np.full(draws["compute"].shape[0], 0.5)
