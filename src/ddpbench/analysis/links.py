"""Two-node cells over a measured network link (links.csv).

A multi-node cell on a link (params.link: unshaped, or shaped by tc to a rate) runs its two
nodes in two network namespaces; a short TCP probe between them at the cell's start records
the bandwidth the link achieved (extra_link_achieved_bps). Over the links, communication per
step follows t = α·calls + bytes/B, and a strategy's time per sample t(B) = a + b/B: where
that crosses the one-process time per sample, the strategy stops paying off.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from scipy import optimize

from ddpbench.analysis.cost_model import fit_latency_bandwidth
from ddpbench.analysis.fits import r_squared
from ddpbench.analysis.health import busy_runs, timed_runs
from ddpbench.analysis.intervals import log_t_interval, order_stat_interval
from ddpbench.analysis.scaling import baseline_runs
from ddpbench.analysis.tables import (
    BASELINE_STRATEGY,
    IRRELEVANT_AT_BASELINE,
    LAUNCH_AXES,
    axes,
    numeric_column,
    varying,
)
from ddpbench.core.params import NO_LINK
from ddpbench.core.run_record import Extra

ACHIEVED = Extra.link_achieved_bps  # bits/s the probe measured at the cell's start
NOMINAL = Extra.link_rate_bps  # bits/s the link was shaped to (none when unshaped)
_RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(kbit|mbit|gbit)")
_RATE_UNIT = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}  # tc's units are decimal
# Settings the baseline ignores (a strategy's own knobs: bucket size, PowerSGD's, ...) tell apart variants of
# a strategy on the same links, not separate link studies.
VARIANT_SETTINGS = tuple(c for c in IRRELEVANT_AT_BASELINE if c not in ("scaling", "link"))
LOSES_BELOW, NEVER_LOSES, ALWAYS_LOSES, NOT_FITTED = "loses below", "never loses", "always loses", "not fitted"
LINK_TABLE_COLUMNS = [
    "kind", "link", "strategy", "setting", "nominal_gbps", "achieved_gbps", "achieved_gbps_ci_low", "achieved_gbps_ci_high",
    "achieved_gbps_ci_level", "n_runs", "alpha_s", "bandwidth_gbps", "r2", "single_s", "a_s", "b_s_gbps",
    "crossing_gbps", "crossing_gbps_ci_low", "crossing_gbps_ci_high", "crossing_other_share", "verdict", "extrapolated",
    "measured_min_gbps", "measured_max_gbps", "note",
]  # fmt: skip
CROSSING_BOOTSTRAP = 1000  # resamples of the runs behind a crossing bandwidth


def link_rate_bps(name) -> float:
    """The nominal rate of a link setting in bits/s ('100mbit' -> 1e8); NaN for none and unshaped."""
    m = _RATE.fullmatch(str(name).strip().lower())
    return float(m[1]) * _RATE_UNIT[m[2]] if m else np.nan


def link_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok timed runs of multi-node cells over a link whose bandwidth was measured."""
    if "link" not in runs or ACHIEVED not in runs or "status" not in runs:
        return runs.iloc[:0]
    ok = timed_runs(runs[runs["status"] == "ok"])
    keep = (ok["link"].astype(str) != NO_LINK) & (numeric_column(ok, ACHIEVED) > 0)
    if "nodes" in ok:
        keep &= numeric_column(ok, "nodes") > 1
    return ok[keep]


def link_group_axes(on_link: pd.DataFrame) -> list[str]:
    """What tells apart link studies within the link runs: their varying axes but strategy, link and nodes."""
    return [c for c in varying(on_link, axes(on_link)) if c not in ("strategy", "link", "nodes")]


def fit_time_per_sample(bandwidth_gbps, seconds) -> tuple[float, float] | None:
    """a [s] and b [s·Gbit/s] in t(B) = a + b/B: the time a strategy takes per sample at bandwidth B
    (computation plus per-call costs, and bytes over the link). Non-negative least squares on relative
    error, as fit_latency_bandwidth; None without two distinct bandwidths."""
    b = np.asarray(bandwidth_gbps, float)
    t = np.asarray(seconds, float)
    keep = (t > 0) & (b > 0) & np.isfinite(b) & np.isfinite(t)
    if len(np.unique(b[keep])) < 2:
        return None
    design = np.column_stack([np.ones(keep.sum()), 1 / b[keep]]) / t[keep, None]
    (a, slope), _ = optimize.nnls(design, np.ones(keep.sum()))
    return float(a), float(slope)


def crossing_bandwidth(a: float, b: float, t_single: float, lo: float = np.nan, hi: float = np.nan):
    """(B*, verdict, extrapolated): the bandwidth below which a strategy with time per sample a + b/B is
    slower than one process taking t_single per sample, B* = b / (t_single − a). With a ≥ t_single it is
    slower at any bandwidth (always loses), with b = 0 faster at any (never loses): no B*. Extrapolated
    when B* lies outside the measured bandwidths [lo, hi]."""
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(t_single)):
        return np.nan, NOT_FITTED, False
    if a >= t_single:
        return np.nan, ALWAYS_LOSES, False
    if b <= 0:
        return np.nan, NEVER_LOSES, False
    cross = b / (t_single - a)
    return float(cross), LOSES_BELOW, bool(not lo <= cross <= hi)


def _alpha_beta(g: pd.DataFrame) -> dict:
    """α [s per call] and the effective bandwidth [Gbit/s] of one link from its runs' communication
    per step (fit_latency_bandwidth), or a note saying why not."""
    calls, sent = numeric_column(g, "comm_calls_per_step").to_numpy(), numeric_column(g, "comm_bytes_per_step").to_numpy()
    secs = (numeric_column(g, "phase_comm_s") / numeric_column(g, "timed_steps")).to_numpy()
    keep = (secs > 0) & np.isfinite(calls) & np.isfinite(sent)
    if keep.sum() < 2:
        return dict(note="α and B not fitted: fewer than 2 runs with measured communication")
    # One proportion of calls to bytes (one strategy, say) cannot separate latency from bandwidth.
    if np.linalg.matrix_rank(np.column_stack([calls, sent])[keep] / secs[keep, None]) < 2:
        return dict(note="α and B not fitted: needs runs with different proportions of calls to bytes "
                         "(several strategies)")  # fmt: skip
    alpha, bps = fit_latency_bandwidth(calls[keep], sent[keep], secs[keep])
    pred = alpha * calls[keep] + sent[keep] / bps
    return dict(alpha_s=alpha, bandwidth_gbps=bps * 8 / 1e9 if np.isfinite(bps) else np.nan, r2=r_squared(secs[keep], pred),
                note="" if np.isfinite(bps) else "bandwidth term not resolved")  # fmt: skip


def _baseline_per_sample(runs: pd.DataFrame, g: pd.DataFrame, baseline_strategy: str) -> tuple[float, np.ndarray]:
    """Seconds per sample of the baseline strategy's p = 1 runs with the settings of the link runs `g`
    (every axis but strategy, launch, link and the settings that cannot matter to it): geometric mean,
    and the runs' own values."""
    info = {c: g[c].astype(str).iloc[0] for c in axes(g) if g[c].astype(str).nunique() == 1}
    base = timed_runs(baseline_runs(runs, info, baseline_strategy, ignore=LAUNCH_AXES))
    values = (1 / numeric_column(base, "samples_per_s")).dropna().to_numpy(float)
    return (log_t_interval(values).estimate if len(values) else np.nan), values


def crossing_interval(sg: pd.DataFrame, single: np.ndarray, verdict: str, seed: int = 0) -> tuple[float, float, float]:
    """A percentile bootstrap of the crossing bandwidth: the strategy's runs resampled within each link,
    the baseline's runs resampled, t(B) refitted and B* recomputed. (low, high, share of resamples with
    another verdict than `verdict`, e.g. "always loses"); NaN with fewer than 2 runs on a side or link."""
    links = [(lg["_gbps"].to_numpy(float), lg["_per_sample"].to_numpy(float))
             for _, lg in sg.groupby(sg["link"].astype(str), sort=False)]  # fmt: skip
    if len(single) < 2 or any(len(t) < 2 for _, t in links):
        return np.nan, np.nan, np.nan
    rng = np.random.default_rng(seed)
    crossings, other = [], 0
    for _ in range(CROSSING_BOOTSTRAP):
        picks = [rng.integers(0, len(t), len(t)) for _, t in links]
        fit = fit_time_per_sample(np.concatenate([b[i] for (b, _), i in zip(links, picks)]),
                                  np.concatenate([t[i] for (_, t), i in zip(links, picks)]))  # fmt: skip
        t_single = float(np.exp(np.mean(np.log(single[rng.integers(0, len(single), len(single))]))))
        cross, v, _ = crossing_bandwidth(*fit, t_single) if fit is not None else (np.nan, NOT_FITTED, False)
        if v == verdict and np.isfinite(cross):
            crossings.append(cross)
        else:
            other += 1
    if len(crossings) < 2:
        return np.nan, np.nan, other / CROSSING_BOOTSTRAP
    lo, hi = np.percentile(crossings, [2.5, 97.5])
    return float(lo), float(hi), other / CROSSING_BOOTSTRAP


def _busy_note(g: pd.DataFrame) -> str:
    """What makes these runs' numbers less trustworthy, to stand next to them: a busy machine slows the
    ranks and the probe alike."""
    k = int(busy_runs(g).sum())
    return f"{k} of {len(g)} runs on a busy machine" if k else ""


def _join_notes(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def links_table(runs: pd.DataFrame, baseline_strategy: str = BASELINE_STRATEGY) -> pd.DataFrame:
    """links.csv, per link study (a combination of link_group_axes but VARIANT_SETTINGS): rows of kind "link", one per link --
    nominal rate, the probe's achieved bandwidth (median over the link's runs, order-statistic interval),
    α and the effective bandwidth of t = α·calls + bytes/B over its runs of every strategy -- and rows of
    kind "crossing", one per strategy (and `setting`, its variant where it ran several): t(B) = a + b/B fitted to its time per sample (1/throughput) over
    the links, the baseline's time per sample and the crossing bandwidth B* (crossing_bandwidth)."""
    on_link = link_runs(runs)
    if on_link.empty:
        return pd.DataFrame(columns=LINK_TABLE_COLUMNS)
    gcols = [c for c in link_group_axes(on_link) if c not in VARIANT_SETTINGS]
    variants = [c for c in link_group_axes(on_link) if c in VARIANT_SETTINGS]
    on_link = on_link.assign(_gbps=numeric_column(on_link, ACHIEVED) / 1e9,
                             _per_sample=1 / numeric_column(on_link, "samples_per_s"))  # fmt: skip
    rows = []
    for key, g in on_link.groupby(gcols, dropna=False, sort=True) if gcols else [((), on_link)]:
        info = dict(zip(gcols, key if isinstance(key, tuple) else (key,)))
        links = []
        for link, lg in g.groupby(g["link"].astype(str), sort=False):
            iv = order_stat_interval(lg["_gbps"])
            shaped = NOMINAL in lg and numeric_column(lg, NOMINAL).notna().any()
            nominal = numeric_column(lg, NOMINAL).median() if shaped else link_rate_bps(link)
            fit = _alpha_beta(lg)
            note = _join_notes(fit.pop("note", ""), _busy_note(lg))
            links.append(dict(info, kind="link", link=link, nominal_gbps=nominal / 1e9, achieved_gbps=iv.estimate,
                              achieved_gbps_ci_low=iv.low, achieved_gbps_ci_high=iv.high,
                              achieved_gbps_ci_level=iv.level, n_runs=len(lg), **fit, note=note))  # fmt: skip
        rows += sorted(links, key=lambda r: -r["achieved_gbps"])  # fastest link first
        t_single, single_runs = _baseline_per_sample(runs, g, baseline_strategy)
        by_strategy = g["strategy"].astype(str)
        for key, sg in g.groupby([by_strategy, *(g[c].astype(str) for c in variants)], sort=True):
            strategy, *values = key if isinstance(key, tuple) else (key,)
            # named only where this strategy ran with several values of the setting
            setting = ", ".join(f"{c}={v}" for c, v in zip(variants, values) if g.loc[by_strategy == strategy, c].nunique() > 1)
            lo, hi = sg["_gbps"].min(), sg["_gbps"].max()
            row = dict(info, kind="crossing", strategy=strategy, setting=setting, single_s=t_single, n_runs=len(sg),
                       measured_min_gbps=lo, measured_max_gbps=hi)  # fmt: skip
            fit = fit_time_per_sample(sg["_gbps"], sg["_per_sample"])
            if fit is None:
                row.update(verdict=NOT_FITTED, extrapolated=False, note="measured on one link: t(B) needs two")
            elif not np.isfinite(t_single):
                row.update(a_s=fit[0], b_s_gbps=fit[1], verdict=NOT_FITTED, extrapolated=False,
                           note=f"no {baseline_strategy} run at p = 1 with these settings to compare with")  # fmt: skip
            else:
                cross, verdict, outside = crossing_bandwidth(*fit, t_single, lo, hi)
                if verdict == LOSES_BELOW:
                    c_lo, c_hi, flip = crossing_interval(sg, single_runs, verdict)
                    row.update(crossing_gbps_ci_low=c_lo, crossing_gbps_ci_high=c_hi, crossing_other_share=flip)
                pred = fit[0] + fit[1] / sg["_gbps"]
                row.update(a_s=fit[0], b_s_gbps=fit[1], crossing_gbps=cross, verdict=verdict, extrapolated=outside,
                           r2=r_squared(sg["_per_sample"], pred),
                           note="extrapolated: outside the measured bandwidths" if outside else "")  # fmt: skip
            row["note"] = _join_notes(row.get("note", ""), _busy_note(sg))
            rows.append(row)
    return pd.DataFrame(rows).reindex(columns=[*gcols, *LINK_TABLE_COLUMNS])
