"""How much of a step's communication the step waits for: x = exposed / comm, from the strategy's
schedule (base.Strategy.schedule).

- blocking, root, periodic: all of it (the ranks wait for each call; through the root the busiest
  rank's bytes already carry the p − 1 messages; periodic per step is its average over the period).
- overlap: buckets handed to one communication stream as backward produces them. Where the strategy's
  cells of the same model recorded when each bucket's gradients were ready (extra.bucket_ready, fractions
  of backward, and extra.bucket_bytes: `readiness`), an event simulation over those buckets
  (`simulated_share`): bucket i ready at fraction_i × W (W the backward time), its call taking its
  bytes' share of comm, one call at a time; exposed = the last completion − the last bucket's ready time
  (backward's gradients are all computed then; what follows in the backward phase, DDP copying the
  reduced buckets back, waits for the communication: the rank measures exposed communication the same
  way, last hand-over to last completion). A target with another bucket count than the measured cell
  (another bucket_mb) takes its buckets from the measured readiness curve, cumulative bytes ready against
  time, interpolated linearly from backward's start (equal buckets, each ready when its last byte is):
  simple, and it keeps where in backward the gradients arrive. Without a record (runs from before it,
  other strategies), n equal buckets evenly over W, the closed form of the same simulation: each call
  takes comm/n; the stream keeps up when comm/n <= W/n and then only the last bucket is exposed, else
  it falls behind and the step waits for the backlog:
      x = max(1/n, 1 − W (n − 1) / (n · comm))
  Either is corrected by δ_s, the mean difference the strategy's own cells measured (hooks that block,
  such as PowerSGD's on gloo; without a record, buckets that are not even), shrunk towards 0.
- prefetch (FSDP): on CPU (gloo) its collectives hold the training thread: all exposed; on CUDA the
  same law as overlap over the whole computation.
- none: no communication. stages (a pipeline) is not modelled: its step is a schedule of micro-batches.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.stepmodel.comm import MissingPart, nearest

SHRINK = 1.0


def overlap_share(n, window, comm) -> np.ndarray:
    """The exposed share of `comm` for `n` even buckets over a backward of `window` seconds."""
    n = np.maximum(np.asarray(n, float), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.maximum(1 / n, 1 - np.asarray(window, float) * (n - 1) / (n * np.asarray(comm, float)))
    return np.clip(np.where(np.asarray(comm) > 0, x, 0.0), 0.0, 1.0)


def simulated_share(ready, shares, window, comm) -> np.ndarray:
    """The exposed share of `comm` for buckets ready at fractions `ready` of a backward of `window`
    seconds (in hand-over order), each bucket's call taking its share `shares` of `comm`, one call at a
    time: (last completion − last ready time) / comm. With ready i/n and shares 1/n, `overlap_share`."""
    window, comm = np.asarray(window, float), np.asarray(comm, float)
    ready = np.maximum.accumulate(np.clip(np.asarray(ready, float), 0.0, None))
    free = np.zeros(np.broadcast(window, comm).shape)
    for f, share in zip(ready, np.asarray(shares, float)):
        free = np.maximum(free, f * window) + share * comm
    with np.errstate(divide="ignore", invalid="ignore"):
        x = (free - ready[-1] * window) / comm
    return np.clip(np.where(comm > 0, x, 0.0), 0.0, 1.0)


def resampled(ready, sizes, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(ready fractions, shares of the bytes) of `n` buckets from measured ones: the measured buckets
    themselves when n is their count, else n equal buckets, each ready when the measured curve of
    cumulative bytes ready against time (linear between hand-overs, from 0 at backward's start) reaches
    its last byte. `sizes` None: equal measured buckets."""
    ready = np.maximum.accumulate(np.asarray(ready, float))
    sizes = np.ones(len(ready)) if sizes is None or len(sizes) != len(ready) else np.asarray(sizes, float)
    shares = sizes / sizes.sum()
    n = max(1, int(n))
    if n == len(ready):
        return ready, shares
    cumulative = np.concatenate([[0.0], np.cumsum(shares)])
    return np.interp(np.arange(1, n + 1) / n, cumulative, np.concatenate([[0.0], ready])), np.full(n, 1.0 / n)


def own_buckets(cell: pd.Series):
    """A measured cell's own recorded buckets as (ready, shares), or None without a record."""
    ready = cell.get("bucket_ready")
    if not isinstance(ready, tuple) or not ready:
        return None
    return resampled(ready, cell.get("bucket_bytes"), len(ready))


def readiness(cells: pd.DataFrame, target: pd.Series, calls: float):
    """The target's buckets as (ready, shares) from the recorded readiness of the strategy's measured
    cells of the same model and setting (the one nearest its bucket_mb), or None where none recorded it.
    The target has as many buckets as its calls per step say against that cell's (the same bucket_mb:
    the measured buckets)."""
    if "bucket_ready" not in cells:
        return None
    has = cells["bucket_ready"].map(lambda v: isinstance(v, tuple) and len(v) > 0)
    same = cells[has & cells["strategy"].eq(target["strategy"]) & cells["compute_key"].eq(target["compute_key"])]
    if same.empty:
        return None
    source = nearest(same, target, ["bucket_mb"])
    m, ref_calls = len(source["bucket_ready"]), float(source["calls"])
    n = max(1, round(float(calls) * m / ref_calls)) if ref_calls > 0 and np.isfinite(float(calls)) else m
    return resampled(source["bucket_ready"], source.get("bucket_bytes"), n)


def modelled_share(schedule: str, device: str, calls, compute, backward, comm, buckets=None) -> np.ndarray:
    """x before the strategy's own correction; `buckets` (ready, shares) where readiness was recorded."""
    if schedule == "none":
        return np.zeros_like(np.asarray(comm, float))
    if schedule == "stages":
        raise MissingPart("the pipeline's schedule (micro-batches through stages) is not modelled")
    if schedule == "overlap":
        if buckets is not None:
            return simulated_share(*buckets, backward, comm)
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
                                              comm[:, j], own_buckets(cells.loc[i]))
                               for j, (i, d, n) in enumerate(zip(ix, devices, g["calls"]))])  # fmt: skip
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
