"""The communication cost model T(p) = T_comp/p + T_comm(p) + T_sync of a strong-scaling group,
with T_comm(p) = α·calls + v(p)·M/B from each strategy's volume law, its bootstrap intervals, the
latency-bandwidth fit t = α·calls + bytes/B (non-negative least squares, nnls2) and the collective
sweep's α and B per device and backend.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.analysis.fits import Fit, r_squared
from ddpbench.analysis.intervals import LEVEL, Interval
from ddpbench.comm import commfit
from ddpbench.strategies import comm_volume_factor
from ddpbench.core.run_record import Extra

N_BOOT = 500  # resamples of the cost model's bootstrap
SEED = 0


def _percentiles(draws: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The bootstrap's percentile interval (low, high) of `draws` at `level`."""
    tail = 100 * (1 - level) / 2
    # Order statistics, not interpolation: a draw can be infinite (an unresolved bandwidth).
    lo, hi = np.percentile(draws, tail, method="lower"), np.percentile(draws, 100 - tail, method="higher")
    return float(lo), float(hi)


def ring_factor(p):
    """Bytes each rank sends in a ring all-reduce, per byte of the reduced tensor."""
    p = np.asarray(p, float)
    return 2 * (p - 1) / p


def fit_latency_bandwidth(calls, sent_bytes, seconds) -> tuple[float, float] | None:
    """α (s per collective call) and B (bytes/s) in t = α·calls + bytes/B; non-negative LSQ
    on relative error. Returns None without two informative points."""
    a = np.column_stack([calls, sent_bytes]).astype(float)
    t = np.asarray(seconds, float)
    keep = (t > 0) & np.isfinite(a).all(axis=1)
    if keep.sum() < 2:
        return None
    a, t = a[keep], t[keep]
    alpha, inv_b = nnls2(a / t[:, None], np.ones_like(t))
    return float(alpha), (1 / inv_b if inv_b > 0 else np.inf)


def nnls2(a, y, w=None) -> np.ndarray:
    """Non-negative least squares with two unknowns for many problems at once: x >= 0 minimising
    sum(w * (a @ x - y)**2) per problem (a: [..., n, 2]; y, w: [..., n]; w = 0 leaves a point out).

    The active-set answer in closed form (the bootstrap solves hundreds of thousands of these; one
    scipy nnls call each was a third of the report's statistics at 8,100 runs): the unconstrained
    optimum when both unknowns are non-negative, else the better one-unknown fit. With collinear
    columns every split is optimal; like Lawson-Hanson's first step, the unknown whose column has
    the larger gradient takes it all. scipy.optimize.nnls's answers up to rounding (unit test)."""
    a, y = np.asarray(a, float), np.asarray(y, float)
    w = np.ones_like(y) if w is None else np.asarray(w, float)
    use = w > 0
    a = np.where(use[..., None], a, 0.0) * np.sqrt(np.where(use, w, 0.0))[..., None]
    y = np.where(use, y, 0.0) * np.sqrt(np.where(use, w, 0.0))
    norm = np.sqrt((a * a).sum(axis=-2))  # columns scaled to unit length: the 2x2 system stays well conditioned
    u = a / np.where(norm > 0, norm, 1.0)[..., None, :]
    s01 = (u[..., 0] * u[..., 1]).sum(axis=-1)
    r = (u * y[..., None]).sum(axis=-2)  # the gradient at x = 0, per unit column
    det = 1.0 - s01 * s01
    both_cols = (norm > 0).all(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        x0 = (r[..., 0] - s01 * r[..., 1]) / det
        x1 = (r[..., 1] - s01 * r[..., 0]) / det
    collinear = ~(det > 1e-10)
    both = both_cols & ~collinear & (x0 >= 0) & (x1 >= 0)
    g = np.where(norm > 0, np.maximum(r, 0.0), 0.0)  # one unknown: x_j = g_j, the residual falls by g_j**2
    first = np.where(collinear, g[..., 0] * norm[..., 0] >= g[..., 1] * norm[..., 1], g[..., 0] >= g[..., 1])
    x = np.stack([np.where(both, x0, np.where(first, g[..., 0], 0.0)),
                  np.where(both, x1, np.where(first, 0.0, g[..., 1]))], axis=-1)  # fmt: skip
    return x / np.where(norm > 0, norm, 1.0)


def fit_comm_sweep(comm: pd.DataFrame) -> pd.DataFrame:
    """α and B per (device, backend) from the sweep's all-reduce times (ddpbench.comm.commfit:
    t = α + 2(p−1)/p·M/B, the time nccl-tests' busbw is defined from, relative residuals)."""
    if comm is None or comm.empty:
        return pd.DataFrame()
    rows = []
    for (device, backend), g in comm.groupby(["device", "backend"]):
        try:
            fit = commfit.fit_latency_bandwidth(g[g["world_size"] > 1], "all_reduce")
        except ValueError:
            continue  # no all-reduce rows, or no bandwidth term: nothing to offer the cost model
        rows.append(dict(device=device, backend=backend, alpha_s=fit.alpha_s, bandwidth_Bps=fit.bandwidth_bps,
                         n_points=fit.n_points, r2=fit.r2))  # fmt: skip
    return pd.DataFrame(rows)


COST_NEEDS = ["step_time_mean_s", "phase_comm_s", "timed_steps", "comm_calls_per_step", "comm_bytes_per_step"]


DEFAULT_VOLUME_LAW = "allreduce"  # runs from before extra_comm_volume existed were all-reduce strategies


def comm_volume_law(g: pd.DataFrame) -> str:
    """How a group's bytes per rank grow with p (extra_comm_volume, the strategy's own statement)."""
    laws = g[Extra.comm_volume].dropna().astype(str) if Extra.comm_volume in g else pd.Series(dtype=str)
    return laws.mode().iloc[0] if len(laws) else DEFAULT_VOLUME_LAW


def volume_factor(law: str, p):
    """Bytes sent per byte of the synchronised tensor at p workers, per the strategy's law."""
    return comm_volume_factor(law, p)


def effective_message_bytes(multi: pd.DataFrame, law: str) -> float:
    """M, the synchronised size implied by the measured bytes: median of bytes / factor(law, p)."""
    return float((multi["comm_bytes_per_step"] / volume_factor(law, multi["world_size"].to_numpy(float))).median())


COST_ARRAYS = ["world_size", "comm_calls_per_step", "comm_bytes_per_step", "phase_comm_s", "timed_steps",
               "step_time_mean_s"]  # fmt: skip


def _cost_core(g: pd.DataFrame, ab: tuple[float, float] | None, law: str = DEFAULT_VOLUME_LAW):
    """One least-squares pass of the cost model: (α, B, T_comp, T_sync, predict) or a reason."""
    return _cost_arrays(g[COST_ARRAYS].to_numpy(float).T, ab, law)


def _cost_arrays(cols: np.ndarray, ab: tuple[float, float] | None, law: str = DEFAULT_VOLUME_LAW):
    """_cost_core on the columns COST_ARRAYS as rows of one float array: the same arithmetic in
    the same order on plain arrays (the bootstrap calls it hundreds of times per group)."""
    p, calls_all, sent_all, comm_all, steps_all, t = cols
    multi = p > 1
    if not multi.any() or not (sent_all[multi] > 0).any():
        return "no measured communication"
    pm = p[multi]
    factor = volume_factor(law, pm)
    if not np.all(factor > 0):
        return f"communication measured but the strategy's volume law is {law!r}"
    calls = float(np.median(calls_all[multi]))
    m_eff = float(np.median(sent_all[multi] / factor))
    ab = ab or fit_latency_bandwidth(calls_all[multi], sent_all[multi], comm_all[multi] / steps_all[multi])
    if ab is None:
        return "too few points with communication to fit latency and bandwidth"
    alpha, bw = ab

    def t_comm(q):
        q = np.asarray(q, float)
        return np.where(q > 1, alpha * calls + volume_factor(law, q) * m_eff / bw, 0.0)

    t_comp, t_sync = _comp_sync(p) @ (t - t_comm(p))
    return alpha, bw, t_comp, t_sync, lambda q: t_comp / np.asarray(q, float) + t_comm(q) + t_sync


def _comp_sync(p: np.ndarray) -> np.ndarray:
    """The least-squares map from step times (minus communication) at world sizes p to (T_comp, T_sync)
    in t = T_comp/p + T_sync: the pseudo-inverse of [1/p, 1], shared by a fit and all its resamples."""
    return np.linalg.pinv(np.column_stack([1 / p, np.ones_like(p)]))


def fit_cost_model(g: pd.DataFrame, sweep: pd.DataFrame | None = None, predict_at=(), n_boot: int = N_BOOT,
                   seed: int = SEED) -> Fit | str:  # fmt: skip
    """T(p) = T_comp/p + T_comm(p) + T_sync for one strong-scaling group (per step).

    T_comm(p) = α·calls + v(p)·M/B, v the strategy's volume law (extra_comm_volume: all-reduce
    2(p−1)/p, gather/scatter p−1, ZeRO 3(p−1)/p, point-to-point 1; all-reduce for runs that do
    not say): α and B from the collective sweep of the same device when given, else from the
    group's own measured communication per step; M is the synchronised size implied by the
    measured bytes sent under the same law. T_comp and T_sync
    then come from linear least squares on the measured mean step time minus T_comm; for
    strategies that hide communication behind backward, T_sync absorbs the overlap (it
    can be negative). Intervals (parameters and the step times predicted at `predict_at`)
    come from a bootstrap that resamples the repeats of every world size and refits;
    without two repeats at every world size there are none.
    """
    if not set(COST_NEEDS) <= set(g.columns):
        return "no communication columns in runs.csv"
    g = g.dropna(subset=COST_NEEDS)
    sizes = g["world_size"].value_counts()
    if len(sizes) < 3:
        return f"too few points: this strategy ran at {len(sizes)} worker count(s), the cost model needs 3"
    ab, source = None, "the runs' measured communication"
    match = sweep[sweep["device"].astype(str) == str(g["device"].iloc[0])] if sweep is not None and len(sweep) and "device" in g else []
    if len(match):
        ab, source = (float(match["alpha_s"].iloc[0]), float(match["bandwidth_Bps"].iloc[0])), "collective sweep"
    law = comm_volume_law(g)
    core = _cost_core(g, ab, law)
    if isinstance(core, str):
        return core
    alpha, bw, t_comp, t_sync, predict = core
    point = [alpha, bw / 1e9, t_comp, t_sync, *(predict(q) for q in predict_at)]
    intervals = [(np.nan, np.nan)] * len(point)
    if sizes.min() >= 2:
        draws = _cost_bootstrap(g, sizes, ab, law, predict_at, n_boot, seed)
        if len(draws) >= n_boot // 2:
            intervals = [_percentiles(np.asarray(col, float)) for col in draws.T]
    if ab is not None:
        intervals[:2] = [(np.nan, np.nan)] * 2  # taken from the sweep, not resampled here
    names = ["alpha_s", "bandwidth_gbps", "t_comp_s", "t_sync_s"]
    params = {n: Interval(float(v), *ci) for n, v, ci in zip(names, point, intervals)}
    if not np.isfinite(bw):
        params["bandwidth_gbps"] = Interval(np.nan)
    fit = Fit(
        params,
        len(g),
        r_squared(g["step_time_mean_s"], predict(g["world_size"])),
        predict,
        f"α and B from {source}; volume law {law}" + ("" if np.isfinite(bw) else "; bandwidth term not resolved"),
    )
    fit.predictions = {q: Interval(float(v), *ci) for q, v, ci in zip(predict_at, point[4:], intervals[4:])}
    return fit


def _cost_bootstrap(g: pd.DataFrame, sizes: pd.Series, ab, law: str, predict_at, n_boot: int, seed: int) -> np.ndarray:
    """The cost model refitted on `n_boot` resamples of each world size's repeats: one row per
    resample that could be fitted, columns α, B [GB/s], T_comp, T_sync and the predictions.

    The same numbers as drawing each resample with rng.choice per world size and refitting it
    with _cost_core (one integers() call with per-element bounds yields the same stream: a unit
    test pins it), but on arrays for all resamples at once: a resample keeps every world size's
    count, so the design matrix, the columns with p > 1 and the volume factors are shared, and
    α and B (from the runs' own communication) are solved for all resamples in one nnls2 call."""
    rng = np.random.default_rng(seed)
    wsz = g["world_size"].to_numpy()
    groups = [np.flatnonzero(wsz == q) for q in sizes.index]
    base = np.concatenate(groups)
    lengths = np.array([len(ix) for ix in groups])
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    picks = rng.integers(0, np.tile(np.repeat(lengths, lengths), n_boot)).reshape(n_boot, len(base))
    idx = base[starts + picks]
    p, calls_all, sent_all, comm_all, steps_all, t = g[COST_ARRAYS].to_numpy(float).T[:, idx]
    p_row = p[0]  # every resample has the same world sizes in the same columns
    multi = p_row > 1
    factor = volume_factor(law, p_row[multi])
    ok = (sent_all[:, multi] > 0).any(axis=1)
    calls = np.median(calls_all[:, multi], axis=1)
    m_eff = np.median(sent_all[:, multi] / factor, axis=1)
    if ab is not None:
        alpha, bw = np.full(n_boot, ab[0]), np.full(n_boot, ab[1])
    else:
        # fit_latency_bandwidth of every resample at once
        secs = comm_all[:, multi] / steps_all[:, multi]
        a = np.stack([calls_all[:, multi], sent_all[:, multi]], axis=2)
        keep = (secs > 0) & np.isfinite(a).all(axis=2)
        ok &= keep.sum(axis=1) >= 2
        with np.errstate(divide="ignore", invalid="ignore"):
            x = nnls2(a / secs[..., None], np.ones_like(secs), keep)
            alpha, bw = x[:, 0], np.where(x[:, 1] > 0, 1 / x[:, 1], np.inf)
    alpha, bw, calls, m_eff, t = alpha[ok], bw[ok], calls[ok], m_eff[ok], t[ok]

    def t_comm(q):
        q = np.asarray(q, float)
        return np.where(q > 1, alpha[:, None] * calls[:, None] + volume_factor(law, q) * m_eff[:, None] / bw[:, None], 0.0)

    t_comp, t_sync = _comp_sync(p_row) @ (t - t_comm(p_row)).T
    preds = [t_comp / float(q) + t_comm(np.array([q]))[:, 0] + t_sync for q in predict_at]
    return np.column_stack([alpha, bw / 1e9, t_comp, t_sync, *preds])
