"""Statistics and scaling-law fits over the aggregated runs table.

Everything here is pure pandas/numpy/scipy on the contract's runs.csv columns, so it is
testable on small hand-made tables. Definitions follow DESIGN.md: over repeats (separate
launches), timing metrics are geometric means with Student-t intervals on the log scale,
other metrics medians with order-statistic intervals of their exact level, ratios (speedup,
strategy vs strategy) Welch t-intervals on log differences; speedup S(p) = T_baseline / T_p
with T the time for a fixed amount of work (one epoch), efficiency E = S/p, Amdahl,
Gustafson, Karp–Flatt and the communication cost model with each strategy's volume law.
Two-node cells over a measured network link get `links_table`: the latency-bandwidth fit per
link and the bandwidth below which each strategy loses to one process.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize, stats

from ddpbench.comm import commfit
from ddpbench.core import run_output
from ddpbench.core.params import NO_LINK, CellParams
from ddpbench.strategies import STRATEGY_SETTINGS

LEVEL = 0.95
N_BOOT = 500  # resamples of the cost model's bootstrap
SEED = 0

# seed may be varied per repeat by the workflow, so it is never part of a cell's identity.
NOT_AXES = ("seed",)
LAUNCH_AXES = ("world_size", "nodes")
# Settings that cannot change a single-worker `single` run: ignored when no baseline
# matches exactly (e.g. the workflow ran `single` once instead of once per bucket size).
IRRELEVANT_AT_BASELINE = (
    "scaling", "bucket_mb", "powersgd_rank", "powersgd_start_iter", "sync_period", "micro_batches",
    "timeout_s", "data_root", "link", "profile_steps",
)  # fmt: skip
BASELINE_STRATEGY = "single"

# Per-cell statistics: summary metric -> label (all medians over repeats).
METRICS = {
    "step_time_median_s": "step time [s]",
    "samples_per_s": "throughput [samples/s]",
    "epoch_time_s": "epoch time [s]",
    "frac_comm": "communication fraction",
    "frac_exposed_comm": "exposed communication fraction",
    "frac_other": "other (unattributed) fraction",
    "frac_imbalance": "imbalance fraction",
    "compute_comm_ratio": "compute / exposed comm",
    "peak_rss_mb": "peak RSS [MB]",
    "cuda_max_allocated_mb": "peak CUDA memory [MB]",
    "rank_skew": "rank skew",
    "train_loss_final": "final train loss",
    "test_acc": "test accuracy",
}
# Where a run's wall time goes beyond its measurement (summary.json timeline, run_output.TIMELINE_SPANS):
# per cell, the median over its timed runs; NaN for runs from before the timeline was recorded.
TIMELINE_COLUMNS = ("fixed_cost_s", *(f"timeline_{span}_s" for span in run_output.TIMELINE_SPANS))
SPEEDUP_COLUMNS = [
    "n_repeats", "baseline", "baseline_n", "time_s", "baseline_time_s", "measure", "speedup", "speedup_ci_low",
    "speedup_ci_high", "speedup_ci_level", "efficiency", "efficiency_ci_low", "efficiency_ci_high", "unstable",
    "unstable_cause", "versions_differ",
]  # fmt: skip
TIME = "epoch_time_s"  # the time of a fixed amount of work: speedup is its ratio


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float = np.nan
    high: float = np.nan
    level: float = np.nan  # the interval's coverage level (NaN: no interval)


# -- tables ------------------------------------------------------------------------------


def load_runs(path) -> pd.DataFrame:
    return load_runs_frame(pd.read_csv(path))


def load_runs_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Normalise a runs table: a status on every row, the epoch time where only throughput
    exists, and runs of a cell made by other code or off-lock packages than its newest runs
    set aside as "superseded" (see `supersede_other_versions`)."""
    runs = runs.copy()
    if "status" not in runs:
        runs["status"] = "ok"
    runs["status"] = runs["status"].fillna("failed").astype(str)
    if TIME not in runs and "samples_per_s" in runs and "dataset_size" in runs:
        runs[TIME] = runs["dataset_size"] / runs["samples_per_s"]
    return supersede_other_versions(runs)


# -- versions: never pool runs of different code or environment ------------------------------

SUPERSEDED = "superseded"


def run_version(runs: pd.DataFrame) -> pd.Series:
    """Per run, what must be equal for two runs to be pooled: the code fingerprint (package
    source + lock) and the packages that differ from the lock. Runs from before provenance
    was recorded share one (unknown) version."""
    code = text_column(runs, "env_code_fingerprint")
    off = text_column(runs, "env_off_lock")
    return code.where(off == "", code + ", off-lock: " + off)


def text_column(runs: pd.DataFrame, name: str) -> pd.Series:
    """A text column with "" for missing values (and for a missing column)."""
    if name not in runs:
        return pd.Series("", index=runs.index)
    return runs[name].map(lambda v: "" if pd.isna(v) else str(v))  # an all-NaN column is float: no fillna("")


def supersede_other_versions(runs: pd.DataFrame) -> pd.DataFrame:
    """The documented rule: within a cell, only the runs of its newest version (the version of
    the run that started last, by env_started_utc, else the last row) enter statistics; the
    others get status "superseded" and a reason naming both versions, so they stay rows and
    counts but never widen or shift an interval."""
    if runs.empty:
        return runs
    version = run_version(runs)
    if version.nunique() < 2:
        return runs
    runs = runs.copy()
    # A table whose runs all succeeded reads `reason` as an all-NaN float column: make room for text.
    runs["reason"] = runs["reason"].astype(object) if "reason" in runs else None
    order = pd.DataFrame({"started": text_column(runs, "env_started_utc"), "row": range(len(runs))}, index=runs.index)
    cols = axes(runs)
    for _, g in runs.groupby(cols, dropna=False, sort=False):
        if version[g.index].nunique() < 2:
            continue
        newest = version[order.loc[g.index].sort_values(["started", "row"]).index[-1]]
        older = g.index[version[g.index] != newest]
        runs.loc[older, "reason"] = [
            f"made by other code or packages ({version[i] or 'unrecorded'}) than the cell's newest runs ({newest})"
            for i in older
        ]
        runs.loc[older, "status"] = SUPERSEDED
    return runs


# Outcomes that the same seed, code, thread count and number of steps must reproduce bit for
# bit on a CPU (deterministic kernels, fixed reduction order).
DETERMINISTIC_OUTCOMES = ("param_norm", "train_loss_final")


def nondeterministic_mask(used: pd.DataFrame, cols: list[str]) -> pd.Series:
    """Per run: an ok CPU run that disagrees on an outcome with another run of the same cell
    (`cols`), seed, version, threads per rank and step count (a determinism warning: something
    outside the recorded settings changed the arithmetic). One grouping over every cell at once:
    per cell it cost half of cell_stats at 1,620 cells."""
    mask = pd.Series(False, index=used.index)
    outcomes = [c for c in DETERMINISTIC_OUTCOMES if c in used]
    if len(used) < 2 or not outcomes or "device" not in used:
        return mask
    cpu = used[used["device"].astype(str) == "cpu"]
    if len(cpu) < 2:
        return mask
    same = [c for c in (*cols, "seed", "total_steps", "env_threads_per_rank") if c in cpu]
    keys = [cpu[c].astype(str) for c in same] + [run_version(cpu)]
    values = pd.DataFrame({o: cpu[o].astype(str) for o in outcomes})
    mask.loc[cpu.index] = (values.groupby(keys, dropna=False, sort=False).transform("nunique") > 1).any(axis=1)
    return mask


def axes(runs: pd.DataFrame) -> list[str]:
    """Columns that identify a cell: every cell parameter present, plus world size and nodes."""
    names = [n for n in CellParams.names() if n not in NOT_AXES] + list(LAUNCH_AXES)
    return [n for n in names if n in runs.columns]


def varying(runs: pd.DataFrame, cols: list[str]) -> list[str]:
    """The grid's axes: the identifying columns that take more than one value. A strategy
    setting that follows from the strategy (params.powersgd_start_iter: 2 holds for powersgd,
    the strategies that do not read it keep the default) tells apart no cells the strategy does
    not: no axis, or it would split figures, panels and labels by strategy a second time."""
    out = [c for c in cols if _several_texts(runs[c])]
    settings = [c for c in out if c in STRATEGY_SETTINGS]
    if settings and "strategy" in runs:
        per_strategy = runs[["strategy", *settings]].astype(str).groupby("strategy").nunique()
        out = [c for c in out if c not in settings or per_strategy[c].max() > 1]
    return out


def _several_texts(s: pd.Series) -> bool:
    """s.astype(str).nunique() > 1 (missing values not counted, 1 and "1" one value), without making
    text of a numeric column: varying() runs dozens of times per report, each time over every axis."""
    if s.dtype.kind in "iub":
        return s.nunique() > 1
    if s.dtype.kind == "f":
        if s.nunique() > 1:
            return True
        zero = np.signbit(s.to_numpy()[s.to_numpy() == 0])
        return bool(zero.any() and not zero.all())  # 0.0 and -0.0: one number, two texts
    return s.astype(str).nunique() > 1


def group_axes(runs: pd.DataFrame) -> list[str]:
    """A scaling group is a cell without its worker count."""
    return [a for a in axes(runs) if a not in LAUNCH_AXES]


def label(row, cols: list[str]) -> str:
    return ", ".join(f"{c}={row[c]}" for c in cols) or "all runs"


def matching(df: pd.DataFrame | None, values: dict) -> pd.DataFrame | None:
    """The rows whose columns equal `values` as text (mixed int/"auto" columns compare predictably);
    a column the table lacks does not narrow it."""
    if df is None or df.empty:
        return df
    keep = np.ones(len(df), bool)
    for c, v in values.items():
        if c in df:
            keep &= (df[c].astype(str) == str(v)).to_numpy()
    return df[keep]


def _key(values) -> tuple[str, ...]:
    # String keys: NaN and mixed int/"auto" columns compare predictably.
    return tuple(str(v) for v in values)


# -- intervals ---------------------------------------------------------------------------
#
# Timing metrics are positive with multiplicative noise, so they are summarised on the log
# scale: the geometric mean with a Student-t interval, whose coverage is tested at 3, 5 and
# 10 repeats (tests/unit/test_interval_coverage.py). Other metrics (fractions, memory,
# accuracy) get the median with a distribution-free order-statistic interval whose exact
# level is recorded, because with few repeats 95 % does not exist for it.

TIMING_METRICS = ("step_time_median_s", "samples_per_s", "epoch_time_s")
# Coverage measured by tests/unit/test_interval_coverage.py (which checks these figures): the
# share of simulated cells whose nominal 95 % interval held the true median (log_t) or the true
# ratio of two cells' medians (welch), by repeat count; log-normal noise, sigma 0.03 run to run
# and 0.1 step to step over 30 steps per run.
TESTED_COVERAGE = {"cells": 4000, "log_t": {3: 0.953, 5: 0.952, 10: 0.9505}, "welch": {3: 0.956, 5: 0.9528, 10: 0.9463}}


def _clean(values) -> np.ndarray:
    if isinstance(values, (pd.Series, np.ndarray)) and values.dtype.kind in "fiu":
        x = np.asarray(values, dtype=float)  # already numeric: what to_numeric and dropna would give
        return x[~np.isnan(x)]
    return np.asarray(pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").dropna(), dtype=float)


def t_halfwidth(y: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """Half-width of the Student-t interval of the mean of `y` along its last axis (2+ values).
    Vectorised so the coverage test runs this very code over thousands of simulated cells."""
    n = y.shape[-1]
    return _t_ppf(0.5 + level / 2, n - 1) * y.std(axis=-1, ddof=1) / np.sqrt(n)


@functools.lru_cache(maxsize=1024)
def _t_ppf(q: float, dof: int) -> float:
    """stats.t.ppf, remembered: thousands of cells share a handful of repeat counts."""
    return stats.t.ppf(q, dof)


def welch_halfwidth(ya: np.ndarray, yb: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """Half-width of the Welch t-interval of mean(ya) − mean(yb) along the last axis, with
    Welch–Satterthwaite degrees of freedom; 0 where both sides have no spread."""
    na, nb = ya.shape[-1], yb.shape[-1]
    va, vb = ya.var(axis=-1, ddof=1) / na, yb.var(axis=-1, ddof=1) / nb
    se = np.sqrt(va + vb)
    with np.errstate(invalid="ignore", divide="ignore"):
        dof = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        return np.where(se > 0, stats.t.ppf(0.5 + level / 2, np.where(se > 0, dof, 1.0)) * se, 0.0)


def log_t_interval(values, level: float = LEVEL) -> Interval:
    """Geometric mean exp(mean log x) with the Student-t interval of the mean log, exponentiated.

    For log-normal run-to-run noise the geometric mean estimates the median run; one value gives no interval.
    """
    x = _clean(values)
    if len(x) == 0:
        return Interval(np.nan)
    if (x <= 0).any():
        return order_stat_interval(x)  # no log scale for a zero or negative value
    if len(x) == 1:
        return Interval(float(x[0]))  # exactly the value, not exp(log(value))
    y = np.log(x)
    est = float(np.exp(y.mean()))
    half = float(t_halfwidth(y, level))
    return Interval(est, float(np.exp(y.mean() - half)), float(np.exp(y.mean() + half)), level)


def welch_log_ratio(a, b, level: float = LEVEL) -> Interval:
    """Ratio of geometric means exp(mean log a − mean log b) with the Welch t-interval of the
    difference of mean logs, exponentiated; needs 2+ values on each side for an interval."""
    la, lb = np.log(_clean(a)), np.log(_clean(b))
    if len(la) == 0 or len(lb) == 0:
        return Interval(np.nan)
    d = la.mean() - lb.mean()
    if len(la) < 2 or len(lb) < 2:
        return Interval(float(np.exp(d)))
    half = float(welch_halfwidth(la, lb, level))
    return Interval(float(np.exp(d)), float(np.exp(d - half)), float(np.exp(d + half)), level)


@functools.lru_cache(maxsize=1024)
def order_stat_rank(n: int, level: float = LEVEL) -> tuple[int, float]:
    """(k, exact level) of the median interval [x_(k), x_(n−k+1)]: the largest k whose
    distribution-free coverage 1 − 2·BinomCDF(k−1; n, 1/2) reaches `level`, else k = 1 (min..max)."""
    coverage = lambda k: float(1 - 2 * stats.binom.cdf(k - 1, n, 0.5))  # noqa: E731
    ks = [k for k in range(1, n // 2 + 1) if coverage(k) >= level]
    k = max(ks, default=1)
    return k, coverage(k)


def order_stat_interval(values, level: float = LEVEL) -> Interval:
    """Median with the order-statistic interval of `order_stat_rank`; its exact level is recorded."""
    x = np.sort(_clean(values))
    if len(x) == 0:
        return Interval(np.nan)
    if len(x) == 1:
        return Interval(float(x[0]))
    k, exact = order_stat_rank(len(x), level)
    return Interval(float(np.median(x)), float(x[k - 1]), float(x[len(x) - k]), exact)


def metric_interval(metric: str, values) -> Interval:
    return log_t_interval(values) if metric in TIMING_METRICS else order_stat_interval(values)


def _percentiles(draws: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    tail = 100 * (1 - level) / 2
    # Order statistics, not interpolation: a draw can be infinite (an unresolved bandwidth).
    lo, hi = np.percentile(draws, tail, method="lower"), np.percentile(draws, 100 - tail, method="higher")
    return float(lo), float(hi)


def rel_halfwidth(iv: Interval) -> float:
    """(high − low) / 2 / estimate: the pyperf-style stability measure; NaN without an interval."""
    return (iv.high - iv.low) / 2 / iv.estimate if iv.estimate else np.nan


# -- stability -----------------------------------------------------------------------------

MAX_REL_CI = 0.05
# Two 1-thread ranks on 2 quiet cores differ by 10-20 % in computation per step (the
# main job's median 0.13): a cause worth naming is well beyond that.
HIGH_RANK_SKEW = 0.25
BUSY_CPU_FRAC = 0.10
NO_INTERVAL = "not checked: fewer than 2 repeats, no interval"
THROUGHPUT = ("samples_per_s", "epoch_time_s", "step_time_median_s")  # the first one present judges stability


def truthy(value) -> bool:
    """A flag as it arrives: a bool, 0/1 or "True"/"False" depending on how the CSV was read."""
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")


def _truthy(s: pd.Series) -> pd.Series:
    return s.map(truthy)


def _col(runs: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(runs[name], errors="coerce") if name in runs else pd.Series(np.nan, index=runs.index)


def busy_runs(runs: pd.DataFrame) -> pd.Series:
    """Runs measured on a busy machine: other processes took > 10 % of the CPU during the timed
    steps (missing column: not busy). The load average is not used: it lags by a minute, so
    right after the previous run's ranks it reads about their count on a quiet machine."""
    return _col(runs, "env_other_cpu_frac") > BUSY_CPU_FRAC


def oversubscribed_runs(runs: pd.DataFrame) -> pd.Series:
    return _truthy(runs["extra_oversubscribed"]) if "extra_oversubscribed" in runs else pd.Series(False, index=runs.index)


def unhealthy_runs(runs: pd.DataFrame) -> pd.Series:
    """Runs that did not learn: loss non-finite, ended far above its start, or spiked (train.py's
    extra.training_health): a fast run that does not learn answers nothing."""
    return text_column(runs, "extra_training_health").isin(["diverged", "unstable"])


def _few_timed_steps(runs: pd.DataFrame) -> bool:
    short = "extra_measurement_short" in runs and _truthy(runs["extra_measurement_short"]).any()
    return bool(short or _col(runs, "timed_steps").median() < _col(runs, "min_timed_steps").median())


def likely_causes(runs: pd.DataFrame) -> str:
    """Why a cell's repeats disagree, all that apply, most specific first."""
    causes = [
        ("few timed steps", _few_timed_steps(runs)),
        ("high rank skew", _col(runs, "rank_skew").median() > HIGH_RANK_SKEW),
        ("busy machine", busy_runs(runs).any()),
        ("oversubscribed", oversubscribed_runs(runs).any()),
    ]
    return "; ".join(name for name, hit in causes if hit) or "run-to-run variation"


def stability(runs: pd.DataFrame, max_rel_ci: float = MAX_REL_CI) -> tuple[bool, str, float]:
    """(unstable, cause, relative half-width of the throughput interval) of one cell's used runs."""
    metric = next((m for m in THROUGHPUT if m in runs), None)
    values = _col(runs, metric).to_numpy(float) if metric else None
    return _cell_stability(runs, np.arange(len(runs)), values, max_rel_ci)


def _cell_stability(runs: pd.DataFrame, used: np.ndarray, values: np.ndarray | None, max_rel_ci: float):
    """stability() of the runs at positions `used`, from the throughput values as an array (the
    causes, read from the runs themselves, only for an unstable cell)."""
    if values is None or np.isnan(values[used]).all():
        return False, "", np.nan
    rel = rel_halfwidth(log_t_interval(values[used]))
    if np.isnan(rel):
        return False, NO_INTERVAL, rel
    return (True, likely_causes(runs.iloc[used]), rel) if rel > max_rel_ci else (False, "", rel)


def _nan_median(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else np.nan


def timed_runs(ok: pd.DataFrame) -> pd.DataFrame:
    """The ok runs that produced a timing value: only these count as repeats (an ok run with no
    timed steps has no time to contribute)."""
    metric = next((m for m in (TIME, *THROUGHPUT) if m in ok), None)
    return ok[ok[metric].notna()] if metric else ok


# -- per-cell statistics -----------------------------------------------------------------


def cell_stats(runs: pd.DataFrame, max_rel_ci: float = MAX_REL_CI) -> pd.DataFrame:
    """One row per cell: run counts by status, each metric's estimate and interval over the
    repeats that measured something (geometric mean and log-t interval for timing metrics,
    median and order-statistic interval otherwise; `{m}_ci_level` is the interval's level),
    and the stability check on the throughput interval.

    Every per-run flag and number is read once into an array and each cell takes its rows by
    position: per cell, pandas filtering cost ~5 ms, 8 s of a 1,620-cell report."""
    cols = axes(runs)
    runs = runs.reset_index(drop=True)
    status = runs["status"].astype(str).to_numpy()
    metric = next((m for m in (TIME, *THROUGHPUT) if m in runs), None)
    timed = (status == "ok") & (runs[metric].notna().to_numpy() if metric else True)  # as timed_runs
    flags = dict(
        n_busy=busy_runs(runs).to_numpy(bool),
        n_oversubscribed=oversubscribed_runs(runs).to_numpy(bool),
        n_off_lock=(text_column(runs, "env_off_lock") != "").to_numpy(),
        n_nondeterministic=nondeterministic_mask(runs[timed], cols).reindex(runs.index, fill_value=False).to_numpy(bool),
        n_diverged=unhealthy_runs(runs).to_numpy(bool),
    )
    values = {m: _col(runs, m).to_numpy(float) for m in METRICS if m in runs}
    medians = {c: _col(runs, c).to_numpy(float) for c in TIMELINE_COLUMNS}
    if ACHIEVED in runs:  # the link's bandwidth as the probe at each run's start measured it
        medians["link_gbps"] = _col(runs, ACHIEVED).to_numpy(float) / 1e9
    judge = next((m for m in THROUGHPUT if m in runs), None)
    rows = []
    for key, idx in runs.groupby(cols, dropna=False, sort=True).indices.items():
        used = idx[timed[idx]]
        st = status[idx]
        row = dict(zip(cols, key if isinstance(key, tuple) else (key,)))
        row.update(
            n_runs=len(idx),
            n_repeats=len(used),
            n_untimed=int((st == "ok").sum()) - len(used),
            n_failed=int((st == "failed").sum()),
            n_timeout=int((st == "timeout").sum()),
            n_skipped=int((st == "skipped").sum()),
            n_superseded=int((st == SUPERSEDED).sum()),
            **{name: int(flag[used].sum()) for name, flag in flags.items()},
        )
        row.update(zip(("unstable", "unstable_cause", "throughput_rel_ci"),
                       _cell_stability(runs, used, values.get(judge), max_rel_ci)))  # fmt: skip
        for m, v in values.items():
            iv = metric_interval(m, v[used])
            row.update({m: iv.estimate, f"{m}_ci_low": iv.low, f"{m}_ci_high": iv.high, f"{m}_ci_level": iv.level})
        row.update({c: _nan_median(v[used]) for c, v in medians.items()})
        rows.append(row)
    link = ["link_gbps"] if ACHIEVED in runs else []
    counts = ["n_runs", "n_repeats", "n_untimed", "n_failed", "n_timeout", "n_skipped", "n_superseded", "n_busy",
              "n_oversubscribed", "n_off_lock", "n_nondeterministic", "n_diverged"]  # fmt: skip
    flags = ["unstable", "unstable_cause", "throughput_rel_ci"]
    stats_cols = [f"{m}{s}" for m in METRICS if m in runs for s in ("", "_ci_low", "_ci_high", "_ci_level")]
    return pd.DataFrame(rows, columns=[*cols, *counts, *flags, *stats_cols, *TIMELINE_COLUMNS, *link])


# -- speedup and efficiency --------------------------------------------------------------


def speedup_table(
    runs: pd.DataFrame, baseline_strategy: str = BASELINE_STRATEGY, max_rel_ci: float = MAX_REL_CI
) -> pd.DataFrame:
    """Speedup and efficiency of every cell against its baseline, with Welch log-t intervals.

    Baseline: `baseline_strategy` (default `single`) at p = 1 with every other axis equal (settings that cannot matter
    for it relaxed if needed); else the strategy's own p = 1 cell; else none (no row).
    S = geometric-mean baseline time / geometric-mean cell time; for weak scaling the same ratio
    of epoch times is the scaled speedup p·t(1)/t(p). A row is unstable when its cell or its baseline is.
    """
    cols = axes(runs)
    other = [c for c in cols if c not in ("strategy", *LAUNCH_AXES)]
    relaxed = [c for c in other if c not in IRRELEVANT_AT_BASELINE]
    ok = runs[(runs["status"] == "ok") & runs[TIME].notna()] if TIME in runs else runs.iloc[:0]
    if ok.empty or "world_size" not in ok:
        return pd.DataFrame(columns=[*cols, *SPEEDUP_COLUMNS])
    p1 = ok[ok["world_size"] == 1]
    single = p1[p1["strategy"] == baseline_strategy] if "strategy" in p1 else p1
    own_cols = [c for c in cols if c not in LAUNCH_AXES]
    # Candidate baselines, most specific first: the matching runs per key.
    candidates = [(other, _runs_by(single, other), baseline_strategy),
                  (relaxed, _runs_by(single, relaxed), baseline_strategy),
                  (own_cols, _runs_by(p1, own_cols), "own p=1")]  # fmt: skip

    memo = _SideMemo(ok, max_rel_ci)
    rows = []
    for key, g in ok.groupby(cols, dropna=False, sort=True):
        row = dict(zip(cols, key))
        p = int(row["world_size"])
        found = [(index[_key(row[c] for c in by)], kind) for by, index, kind in candidates if _key(row[c] for c in by) in index]
        if not found:
            continue
        base_runs, kind = found[0]
        base, t = base_runs[TIME].to_numpy(), g[TIME].to_numpy()
        if p == 1 and (kind == "own p=1" or row.get("strategy") == baseline_strategy):
            s = Interval(1.0, *((1.0, 1.0, LEVEL) if len(t) > 1 else ()))  # the baseline itself
        else:
            s = welch_log_ratio(base, t)
        weak = str(row.get("scaling", "strong")) == "weak"
        row.update(
            n_repeats=len(t),
            baseline=kind,
            baseline_n=len(base),
            time_s=log_t_interval(t).estimate,
            baseline_time_s=log_t_interval(base).estimate,
            measure="scaled speedup" if weak else "speedup",
            speedup=s.estimate,
            speedup_ci_low=s.low,
            speedup_ci_high=s.high,
            speedup_ci_level=s.level,
            efficiency=s.estimate / p,
            efficiency_ci_low=s.low / p,
            efficiency_ci_high=s.high / p,
            **_pair_stability({"cell": g, "baseline": base_runs}, max_rel_ci, memo),
            versions_differ=memo.versions_differ(g, base_runs),
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=[*cols, *SPEEDUP_COLUMNS])


def versions_differ(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """A ratio of two sides measured with different code or packages: flagged, since the
    difference may be the change rather than the setting."""
    return set(run_version(a)) != set(run_version(b))


class _SideMemo:
    """stability() and run versions of the sides of ratios, each side computed once: in a large
    grid one baseline serves many cells and one cell appears in a comparison with every other
    strategy. Sides are row subsets of `runs`, known by their index."""

    def __init__(self, runs: pd.DataFrame, max_rel_ci: float):
        self.max_rel_ci = max_rel_ci
        self.version = run_version(runs)
        self.stable: dict[tuple, tuple[bool, str, float]] = {}
        self.seen_versions: dict[tuple, frozenset] = {}

    def stability(self, df: pd.DataFrame) -> tuple[bool, str, float]:
        key = tuple(df.index)
        if key not in self.stable:
            self.stable[key] = stability(df, self.max_rel_ci)
        return self.stable[key]

    def versions(self, df: pd.DataFrame) -> frozenset:
        key = tuple(df.index)
        if key not in self.seen_versions:
            self.seen_versions[key] = frozenset(self.version[df.index])
        return self.seen_versions[key]

    def versions_differ(self, a: pd.DataFrame, b: pd.DataFrame) -> bool:
        return self.versions(a) != self.versions(b)


def _pair_stability(sides: dict[str, pd.DataFrame], max_rel_ci: float, memo: _SideMemo | None = None) -> dict:
    """unstable / unstable_cause of a ratio: either side unstable makes it so; causes name their side."""
    parts = []
    for side, df in sides.items():
        unstable, cause, _ = memo.stability(df) if memo else stability(df, max_rel_ci)
        if unstable:
            parts.append(f"{side}: {cause}")
    return dict(unstable=bool(parts), unstable_cause="; ".join(parts))


def _runs_by(df: pd.DataFrame, by: list[str]) -> dict[tuple[str, ...], pd.DataFrame]:
    if not by:
        return {(): df} if len(df) else {}
    return {_key(k): g for k, g in df.groupby(by, dropna=False)}


# -- the profiler's breakdown of a step (profile_steps > 0: aggregate's profile.csv) -------------


def profile_cells(profile: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`) and operator: seconds of self time per profiled step, the mean over the
    ranks of a run (an operator outside a rank's top list counts 0 there) and the median over the
    cell's runs; `comm` marks communication operators, `activity` the device's (cuda) where a run
    recorded it, else cpu. Rows of one cell sum to its profiled step (the "other" row included)."""
    pr = profile.assign(self_s_per_step=pd.to_numeric(profile["self_s_per_step"], errors="coerce"),
                        comm=pd.to_numeric(profile["comm"], errors="coerce") > 0)  # fmt: skip
    has_cuda = pr.groupby("run_dir")["activity"].transform(lambda a: (a.astype(str) == "cuda").any())
    pr = pr[pr["activity"].astype(str) == np.where(has_cuda, "cuda", "cpu")]
    ranks = pr.groupby("run_dir")["rank"].transform("nunique")
    pr = pr.assign(per_rank=pr["self_s_per_step"] / ranks)
    out = []
    for key, g in pr.groupby([*cols, "activity"], dropna=False, sort=False):
        runs = g.pivot_table(index=["op", "comm"], columns="run_dir", values="per_rank", aggfunc="sum", fill_value=0.0)
        med = runs.median(axis=1).rename("self_s").reset_index()  # a run without the operator: 0 there
        out.append(med.assign(**dict(zip([*cols, "activity"], key))))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=[*cols, "activity", "op", "comm", "self_s"])


def profile_comm_shares(profile: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per profiled cell (`cols`): `comm_share`, its communication operators' share of the profiled
    step (profile_cells); NaN for a cell without profiled time."""
    table = profile_cells(profile, cols)
    rows = []
    for key, g in table.groupby(cols, dropna=False, sort=False):
        total = g["self_s"].sum()
        rows.append((*(key if isinstance(key, tuple) else (key,)), g.loc[g["comm"], "self_s"].sum() / total if total > 0 else np.nan))
    return pd.DataFrame(rows, columns=[*cols, "comm_share"])


# -- comparisons between strategies -----------------------------------------------------------

COMPARISON_COLUMNS = [
    "strategy_a", "strategy_b", "n_a", "n_b", "ratio", "ratio_ci_low", "ratio_ci_high", "ratio_ci_level", "verdict",
    "unstable", "unstable_cause", "versions_differ",
]  # fmt: skip
NO_DIFFERENCE = "no detectable difference"
NO_COMPARISON = "no interval (fewer than 2 repeats on a side)"


def verdict(iv: Interval) -> str:
    """A difference only when the interval of the ratio A/B excludes 1."""
    if np.isnan(iv.low) or np.isnan(iv.high):
        return NO_COMPARISON
    if iv.low > 1:
        return "A faster"
    if iv.high < 1:
        return "B faster"
    return NO_DIFFERENCE


def comparisons_table(runs: pd.DataFrame, max_rel_ci: float = MAX_REL_CI) -> pd.DataFrame:
    """comparisons.csv: for every setting (all axes equal except strategy) and world size, every
    pair of strategies A < B (by name) as the throughput ratio A/B with its Welch log-t interval
    (welch_log_ratio), unstable when either side is (stability), versions_differ when the sides'
    run versions differ.

    Each cell (setting and strategy) is read once, by position, and the Student-t quantiles of
    all pairs come from one call: per pair, pandas filtering and scipy's ppf cost ~0.7 ms, 3 s of
    a 1,620-cell report."""
    cols = axes(runs)
    setting = [c for c in cols if c != "strategy"]
    ok = runs[runs["status"] == "ok"]
    if "strategy" not in runs or "samples_per_s" not in runs or ok.empty:
        return pd.DataFrame(columns=[*setting, *COMPARISON_COLUMNS])
    ok = ok[ok["samples_per_s"].notna() & ok["strategy"].notna()].reset_index(drop=True)
    if ok.empty:
        return pd.DataFrame(columns=[*setting, *COMPARISON_COLUMNS])
    values = _col(ok, "samples_per_s").to_numpy(float)
    metric = next((m for m in THROUGHPUT if m in ok), None)  # as stability()
    throughput = _col(ok, metric).to_numpy(float) if metric else None
    version = run_version(ok).to_numpy()
    by = ok.groupby([*setting, "strategy"], dropna=False, sort=True)  # settings in order, strategies by name
    gid = by.ngroup().to_numpy()
    members = np.split(np.argsort(gid, kind="stable"), np.cumsum(np.bincount(gid))[:-1])
    settings: dict[tuple, list] = {}
    for key, pos in zip(by.size().index, members):
        key = key if isinstance(key, tuple) else (key,)
        with np.errstate(invalid="ignore", divide="ignore"):  # as welch_log_ratio: the log of what is there
            la = np.log(values[pos][~np.isnan(values[pos])])
        unstable, cause, _ = _cell_stability(ok, pos, throughput, max_rel_ci)
        settings.setdefault(_key(key[:-1]), (key[:-1], []))[1].append(dict(  # (as text: NaN keys are not equal)
            name=key[-1], n=len(pos), logs=la, mean=la.mean() if len(la) else np.nan,
            var=la.var(ddof=1) / len(la) if len(la) > 1 else np.nan, unstable=unstable, cause=cause,
            versions=frozenset(version[pos])))  # fmt: skip
    rows, dofs = [], []
    for key, sides in settings.values():
        for i, a in enumerate(sides):
            for b in sides[i + 1 :]:
                d = a["mean"] - b["mean"]
                se = np.sqrt(a["var"] + b["var"])
                interval = len(a["logs"]) > 1 and len(b["logs"]) > 1
                dof = 1.0
                if interval and se > 0:  # Welch–Satterthwaite, as welch_halfwidth
                    va, vb = np.float64(a["var"]), np.float64(b["var"])
                    dof = (va + vb) ** 2 / (va**2 / (len(a["logs"]) - 1) + vb**2 / (len(b["logs"]) - 1))
                dofs.append(dof)
                causes = [f"{s['name']}: {s['cause']}" for s in (a, b) if s["unstable"]]
                rows.append(dict(zip(setting, key), strategy_a=a["name"], strategy_b=b["name"], n_a=a["n"], n_b=b["n"],
                                 _d=d, _se=se if interval else np.nan, unstable=bool(causes),
                                 unstable_cause="; ".join(causes), versions_differ=a["versions"] != b["versions"]))  # fmt: skip
    q = stats.t.ppf(0.5 + LEVEL / 2, np.asarray(dofs, float))  # one call for every pair
    for row, qi in zip(rows, q):
        d, se = row.pop("_d"), row.pop("_se")
        if np.isnan(d):
            iv = Interval(np.nan)
        elif np.isnan(se):
            iv = Interval(float(np.exp(d)))
        else:
            half = float(qi * se) if se > 0 else 0.0
            iv = Interval(float(np.exp(d)), float(np.exp(d - half)), float(np.exp(d + half)), LEVEL)
        row.update(ratio=iv.estimate, ratio_ci_low=iv.low, ratio_ci_high=iv.high, ratio_ci_level=iv.level,
                   verdict=verdict(iv))  # fmt: skip
    return pd.DataFrame(rows, columns=[*setting, *COMPARISON_COLUMNS])


# -- fits ----------------------------------------------------------------------------------


def karp_flatt(speedup, p):
    """Experimentally determined serial fraction e = (1/S − 1/p)/(1 − 1/p), p > 1."""
    speedup, p = np.asarray(speedup, float), np.asarray(p, float)
    return (1 / speedup - 1 / p) / (1 - 1 / p)


def amdahl_time(p, t1, f):
    return t1 * (f + (1 - f) / np.asarray(p, float))


def gustafson_speedup(p, alpha):
    p = np.asarray(p, float)
    return p - alpha * (p - 1)


def _t_interval(est: np.ndarray, cov: np.ndarray, dof: int, level: float = LEVEL):
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    q = stats.t.ppf(0.5 + level / 2, dof)
    return est - q * se, est + q * se


def _r2(y, yhat) -> float:
    y, yhat = np.asarray(y, float), np.asarray(yhat, float)
    ss_tot = np.sum((y - y.mean()) ** 2)
    return float(1 - np.sum((y - yhat) ** 2) / ss_tot) if ss_tot > 0 else np.nan


@dataclass
class Fit:
    params: dict[str, Interval]
    n_points: int
    r2: float
    predict: callable = None  # p -> value (time or speedup, per law)
    note: str = ""
    predictions: dict = None  # p -> Interval of the predicted value, where the fit has intervals for them


def fit_amdahl(p, t) -> Fit | str:
    """Serial fraction f (and T(1)) from times by nonlinear least squares on relative error.

    T(1) is fitted too, so a constant per-strategy overhead does not bias f; the interval
    is the Student-t interval from the covariance (3% timing noise is multiplicative, hence
    sigma = T). Returns a reason string when there are too few distinct worker counts.
    """
    p, t = np.asarray(p, float), np.asarray(t, float)
    if len(np.unique(p)) < 3:
        return f"too few points: {len(np.unique(p))} distinct worker counts, Amdahl needs 3"
    (t1, f), cov = optimize.curve_fit(amdahl_time, p, t, p0=(float(t.max()), 0.1), sigma=t, bounds=([0, 0], [np.inf, 1]))
    lo, hi = _t_interval(np.array([t1, f]), cov, len(p) - 2)
    return Fit(
        {"f": Interval(f, max(lo[1], 0.0), min(hi[1], 1.0)), "t1_s": Interval(t1, lo[0], hi[0])},
        len(p),
        _r2(t, amdahl_time(p, t1, f)),
        lambda q, t1=t1, f=f: amdahl_time(q, t1, f),
    )


def fit_gustafson(p, s) -> Fit | str:
    """α in S(p) = p − α(p − 1): linear least squares through S(1) = 1, Student-t interval."""
    p, s = np.asarray(p, float), np.asarray(s, float)
    above = p > 1
    if len(np.unique(p[above])) < 2:
        return f"too few points: {len(np.unique(p[above]))} distinct worker counts above 1, Gustafson needs 2"
    x, y = (p - 1)[above], (p - s)[above]  # p − S = α (p − 1)
    alpha = float(x @ y / (x @ x))
    dof = len(x) - 1
    var = np.sum((y - alpha * x) ** 2) / dof / (x @ x)
    lo, hi = _t_interval(np.array([alpha]), np.array([[var]]), dof)
    return Fit(
        {"alpha": Interval(alpha, lo[0], hi[0])},
        len(p),
        _r2(s, gustafson_speedup(p, alpha)),
        lambda q, a=alpha: gustafson_speedup(q, a),
    )


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


def _per_step(runs: pd.DataFrame, col: str) -> pd.Series:
    return runs[col] / runs["timed_steps"]


COST_NEEDS = ["step_time_mean_s", "phase_comm_s", "timed_steps", "comm_calls_per_step", "comm_bytes_per_step"]


DEFAULT_VOLUME_LAW = "allreduce"  # runs from before extra_comm_volume existed were all-reduce strategies


def comm_volume_law(g: pd.DataFrame) -> str:
    """How a group's bytes per rank grow with p (extra_comm_volume, the strategy's own statement)."""
    laws = g["extra_comm_volume"].dropna().astype(str) if "extra_comm_volume" in g else pd.Series(dtype=str)
    return laws.mode().iloc[0] if len(laws) else DEFAULT_VOLUME_LAW


def volume_factor(law: str, p):
    """Bytes sent per byte of the synchronised tensor at p workers, per the strategy's law."""
    return run_output.comm_volume_factor(law, p)


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
        return f"too few points: {len(sizes)} distinct worker counts, the cost model needs 3"
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
        _r2(g["step_time_mean_s"], predict(g["world_size"])),
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


FIT_COLUMNS = ["group", "law", "parameter", "p", "kind", "estimate", "ci_low", "ci_high", "n_points", "r2", "note"]


def fits_table(
    runs: pd.DataFrame,
    speed: pd.DataFrame,
    comm: pd.DataFrame | None = None,
    baseline_strategy: str = BASELINE_STRATEGY,
    n_boot: int = N_BOOT,
) -> pd.DataFrame:
    """fits.csv: one row per group, law and parameter; predictions at 2× and 4× the largest
    measured p are rows of kind 'prediction'; fits without enough points say so, with no number."""
    rows: list[dict] = []
    sweep = fit_comm_sweep(comm) if comm is not None else pd.DataFrame()
    for _, s in sweep.iterrows():
        grp = f"device={s['device']}, backend={s['backend']}"
        for name, value in (("alpha_s", s["alpha_s"]), ("bandwidth_gbps", s["bandwidth_Bps"] / 1e9)):
            rows.append(dict(group=grp, law="comm_sweep", parameter=name, kind="fit", estimate=value,
                             n_points=s["n_points"], r2=s["r2"], note="all_reduce in the collective sweep"))  # fmt: skip
    if speed.empty:
        return pd.DataFrame(rows, columns=FIT_COLUMNS)
    gcols = group_axes(runs)
    shown = varying(runs, gcols)
    ok = runs[(runs["status"] == "ok") & runs[TIME].notna()]
    # Each group's runs by its settings as text, looked up once for all groups
    texts = pd.DataFrame({c: ok[c].astype(str) for c in gcols})
    by_text = {k if isinstance(k, tuple) else (k,): ix for k, ix in texts.groupby(gcols, sort=False).indices.items()} if gcols else {}
    p1 = runs[(runs["status"] == "ok") & (runs["world_size"] == 1)]  # the baselines' runs, filtered once
    base_times: dict = {}
    for key, sg in speed.groupby(gcols, dropna=False, sort=True):
        info = dict(zip(gcols, key))
        if info.get("strategy") == baseline_strategy and sg["world_size"].max() == 1:
            continue  # the baseline itself: nothing scales
        grp = label(info, shown)
        g = ok.iloc[by_text.get(tuple(str(v) for v in info.values()), [])] if gcols else ok
        p_max = int(sg["world_size"].max())
        t_base = float(sg["baseline_time_s"].median())
        weak = str(info.get("scaling", "strong")) == "weak"

        def add(law, parameter, kind="fit", iv=None, p=np.nan, n=np.nan, r2=np.nan, note="", **_):
            iv = iv or Interval(np.nan)
            rows.append(dict(group=grp, **info, law=law, parameter=parameter, p=p, kind=kind, estimate=iv.estimate,
                             ci_low=iv.low, ci_high=iv.high, n_points=n, r2=r2, note=note))

        def add_fit(law, fit, to_speedup):
            if isinstance(fit, str):
                add(law, "-", kind="too few points" if fit.startswith("too few") else "not fitted", note=fit, n=len(g))
                return
            for name, iv in fit.params.items():
                add(law, name, iv=iv, n=fit.n_points, r2=fit.r2, note=fit.note)
            for q in (2 * p_max, 4 * p_max):
                add(law, "speedup", kind="prediction", iv=to_speedup(fit, q), p=q, n=fit.n_points,
                    note=f"prediction at {q // p_max}× the largest measured p")

        if weak:
            add_fit("gustafson", fit_gustafson(g["world_size"], t_base / g[TIME]), lambda f, q: Interval(float(f.predict(q))))
            continue

        def amdahl_speedup(fit, q):
            f_iv, t1 = fit.params["f"], fit.params["t1_s"].estimate
            s = lambda f: float(t_base / amdahl_time(q, t1, f))  # noqa: E731 — S falls as f rises
            return Interval(s(f_iv.estimate), s(f_iv.high), s(f_iv.low))

        add_fit("amdahl", fit_amdahl(g["world_size"], g[TIME]), amdahl_speedup)
        for _, r in sg[sg["world_size"] > 1].iterrows():
            e = karp_flatt([r["speedup"], r["speedup_ci_high"], r["speedup_ci_low"]], r["world_size"])
            add("karp_flatt", "e", kind="measured", iv=Interval(*map(float, e)), p=int(r["world_size"]), n=int(r["n_repeats"]),
                note="experimentally determined serial fraction")
        key = _baseline_key(info)  # strategies at the same settings share one baseline
        if key not in base_times:
            base_times[key] = _baseline_step_time(p1, info, baseline_strategy)
        step_base = base_times[key]
        def cost_speedup(fit, q):
            t = fit.predictions[q]  # predicted step time; speedup falls as it rises
            return Interval(step_base / t.estimate, step_base / t.high, step_base / t.low) if step_base else Interval(np.nan)

        add_fit("cost_model", fit_cost_model(g, sweep, predict_at=(2 * p_max, 4 * p_max), n_boot=n_boot), cost_speedup)
    return pd.DataFrame(rows).reindex(columns=[*FIT_COLUMNS[:1], *gcols, *FIT_COLUMNS[1:]])


def _baseline_runs(runs: pd.DataFrame, info: dict, baseline_strategy: str, ignore: tuple = ()) -> pd.DataFrame:
    """The baseline strategy's ok p = 1 runs with the settings `info` (strategy, the settings that
    cannot matter to it and `ignore` aside)."""
    ok = runs[(runs["status"] == "ok") & (_col(runs, "world_size") == 1)]
    if "strategy" in ok:
        ok = ok[ok["strategy"].astype(str) == baseline_strategy]
    for c, v in _baseline_key(info, ignore):
        if c in ok:
            ok = ok[ok[c].astype(str) == v]
    return ok


def _baseline_key(info: dict, ignore: tuple = ()) -> tuple[tuple[str, str], ...]:
    """The settings of `info` that select its baseline's runs (as text, as the runs are matched)."""
    return tuple((c, str(v)) for c, v in info.items() if c not in ("strategy", *ignore, *IRRELEVANT_AT_BASELINE))


def _baseline_step_time(runs: pd.DataFrame, info: dict, baseline_strategy: str) -> float | None:
    """Median step time of the baseline strategy's p = 1 runs matching the group (strong scaling:
    same global batch, hence the same number of steps per epoch)."""
    ok = _baseline_runs(runs, info, baseline_strategy)
    col = "step_time_mean_s" if "step_time_mean_s" in ok else "step_time_median_s"
    return float(ok[col].median()) if len(ok) else None


# -- links: the two nodes of a cell over a measured network link -------------------------------
#
# A multi-node cell on a link (params.link: unshaped, or shaped by tc to a rate) runs its two
# nodes in two network namespaces; a short TCP probe between them at the cell's start records
# the bandwidth the link achieved (extra_link_achieved_bps). Over the links, communication per
# step follows t = α·calls + bytes/B, and a strategy's time per sample t(B) = a + b/B: where
# that crosses the one-process time per sample, the strategy stops paying off.

ACHIEVED = "extra_link_achieved_bps"  # bits/s the probe measured at the cell's start
NOMINAL = "extra_link_rate_bps"  # bits/s the link was shaped to (none when unshaped)
_RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(kbit|mbit|gbit)")
_RATE_UNIT = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}  # tc's units are decimal
# Settings the baseline ignores (a strategy's own knobs: bucket size, PowerSGD's, ...) tell apart variants of
# a strategy on the same links, not separate link studies.
VARIANT_SETTINGS = tuple(c for c in IRRELEVANT_AT_BASELINE if c not in ("scaling", "link"))
LOSES_BELOW, NEVER_LOSES, ALWAYS_LOSES, NOT_FITTED = "loses below", "never loses", "always loses", "not fitted"
LINK_TABLE_COLUMNS = [
    "kind", "link", "strategy", "setting", "nominal_gbps", "achieved_gbps", "achieved_gbps_ci_low", "achieved_gbps_ci_high",
    "achieved_gbps_ci_level", "n_runs", "alpha_s", "bandwidth_gbps", "r2", "single_s", "a_s", "b_s_gbps",
    "crossing_gbps", "verdict", "extrapolated", "measured_min_gbps", "measured_max_gbps", "note",
]  # fmt: skip


def link_rate_bps(name) -> float:
    """The nominal rate of a link setting in bits/s ('100mbit' -> 1e8); NaN for none and unshaped."""
    m = _RATE.fullmatch(str(name).strip().lower())
    return float(m[1]) * _RATE_UNIT[m[2]] if m else np.nan


def link_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok timed runs of multi-node cells over a link whose bandwidth was measured."""
    if "link" not in runs or ACHIEVED not in runs or "status" not in runs:
        return runs.iloc[:0]
    ok = timed_runs(runs[runs["status"] == "ok"])
    keep = (ok["link"].astype(str) != NO_LINK) & (_col(ok, ACHIEVED) > 0)
    if "nodes" in ok:
        keep &= _col(ok, "nodes") > 1
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
    calls, sent = _col(g, "comm_calls_per_step").to_numpy(), _col(g, "comm_bytes_per_step").to_numpy()
    secs = (_col(g, "phase_comm_s") / _col(g, "timed_steps")).to_numpy()
    keep = (secs > 0) & np.isfinite(calls) & np.isfinite(sent)
    if keep.sum() < 2:
        return dict(note="α and B not fitted: fewer than 2 runs with measured communication")
    # One proportion of calls to bytes (one strategy, say) cannot separate latency from bandwidth.
    if np.linalg.matrix_rank(np.column_stack([calls, sent])[keep] / secs[keep, None]) < 2:
        return dict(note="α and B not fitted: needs runs with different proportions of calls to bytes "
                         "(several strategies)")  # fmt: skip
    alpha, bps = fit_latency_bandwidth(calls[keep], sent[keep], secs[keep])
    pred = alpha * calls[keep] + sent[keep] / bps
    return dict(alpha_s=alpha, bandwidth_gbps=bps * 8 / 1e9 if np.isfinite(bps) else np.nan, r2=_r2(secs[keep], pred),
                note="" if np.isfinite(bps) else "bandwidth term not resolved")  # fmt: skip


def _baseline_per_sample(runs: pd.DataFrame, g: pd.DataFrame, baseline_strategy: str) -> float:
    """Seconds per sample of the baseline strategy's p = 1 runs with the settings of the link runs `g`
    (every axis but strategy, launch, link and the settings that cannot matter to it): geometric mean."""
    info = {c: g[c].astype(str).iloc[0] for c in axes(g) if g[c].astype(str).nunique() == 1}
    base = timed_runs(_baseline_runs(runs, info, baseline_strategy, ignore=LAUNCH_AXES))
    return log_t_interval(1 / _col(base, "samples_per_s")).estimate if len(base) else np.nan


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
    on_link = on_link.assign(_gbps=_col(on_link, ACHIEVED) / 1e9, _per_sample=1 / _col(on_link, "samples_per_s"))
    rows = []
    for key, g in on_link.groupby(gcols, dropna=False, sort=True) if gcols else [((), on_link)]:
        info = dict(zip(gcols, key if isinstance(key, tuple) else (key,)))
        links = []
        for link, lg in g.groupby(g["link"].astype(str), sort=False):
            iv = order_stat_interval(lg["_gbps"])
            nominal = _col(lg, NOMINAL).median() if NOMINAL in lg and _col(lg, NOMINAL).notna().any() else link_rate_bps(link)
            fit = _alpha_beta(lg)
            note = _join_notes(fit.pop("note", ""), _busy_note(lg))
            links.append(dict(info, kind="link", link=link, nominal_gbps=nominal / 1e9, achieved_gbps=iv.estimate,
                              achieved_gbps_ci_low=iv.low, achieved_gbps_ci_high=iv.high,
                              achieved_gbps_ci_level=iv.level, n_runs=len(lg), **fit, note=note))  # fmt: skip
        rows += sorted(links, key=lambda r: -r["achieved_gbps"])  # fastest link first
        t_single = _baseline_per_sample(runs, g, baseline_strategy)
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
                pred = fit[0] + fit[1] / sg["_gbps"]
                row.update(a_s=fit[0], b_s_gbps=fit[1], crossing_gbps=cross, verdict=verdict, extrapolated=outside,
                           r2=_r2(sg["_per_sample"], pred),
                           note="extrapolated: outside the measured bandwidths" if outside else "")  # fmt: skip
            row["note"] = _join_notes(row.get("note", ""), _busy_note(sg))
            rows.append(row)
    return pd.DataFrame(rows).reindex(columns=[*gcols, *LINK_TABLE_COLUMNS])


# -- per epoch, per round, the batch auto chose (the accelerators study) ----------------------------


def epoch_throughput(runs: pd.DataFrame, steps: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`, from runs.csv through run_dir) and epoch: `samples_per_s`, the global samples
    of the epoch's steps (every rank's, summed: a pipeline's samples are its last stage's) over the
    steps' pacing time (per step the slowest rank's), median over the cell's ok runs; `warmup` when
    the epoch holds untimed warm-up steps (in some run), `n` the runs measured."""
    empty = pd.DataFrame(columns=[*cols, "epoch", "samples_per_s", "warmup", "n"])
    need = {"run_dir", "epoch", "step", "rank", "samples", "total_s", "timed"}
    if steps is None or steps.empty or not need <= set(steps.columns):
        return empty
    ok = runs.loc[runs["status"] == "ok", ["run_dir", *cols]].drop_duplicates("run_dir")
    st = steps[list(need)].merge(ok, on="run_dir", how="inner")
    if st.empty:
        return empty
    st = st.assign(samples=pd.to_numeric(st["samples"], errors="coerce"), total_s=pd.to_numeric(st["total_s"], errors="coerce"),
                   untimed=pd.to_numeric(st["timed"], errors="coerce") == 0)  # fmt: skip
    per_step = st.groupby(["run_dir", "epoch", "step"], sort=False).agg(samples=("samples", "sum"), s=("total_s", "max"),
                                                                        untimed=("untimed", "any"))  # fmt: skip
    per_epoch = per_step.groupby(["run_dir", "epoch"], sort=False).agg(samples=("samples", "sum"), s=("s", "sum"),
                                                                       warmup=("untimed", "any")).reset_index()  # fmt: skip
    per_epoch = per_epoch[per_epoch["s"] > 0].merge(ok, on="run_dir")
    per_epoch["samples_per_s"] = per_epoch["samples"] / per_epoch["s"]
    out = per_epoch.groupby([*cols, "epoch"], dropna=False, sort=True).agg(
        samples_per_s=("samples_per_s", "median"), warmup=("warmup", "any"), n=("run_dir", "nunique")).reset_index()  # fmt: skip
    return out


def round_time(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`): `round_s`, the median over its ok runs of one round, the steps between two
    synchronisations of the model: local SGD's measured round (extra.round_time_s: its local steps
    and the averaging), else one step (every other strategy synchronises each step); `steps_per_round`."""
    ok = runs[runs["status"] == "ok"]
    step = pd.to_numeric(ok.get("step_time_median_s", pd.Series(np.nan, index=ok.index)), errors="coerce")
    measured = pd.to_numeric(ok.get("extra_round_time_s", pd.Series(np.nan, index=ok.index)), errors="coerce")
    per = pd.to_numeric(ok.get("extra_steps_per_round", pd.Series(np.nan, index=ok.index)), errors="coerce")
    # A run too short for one whole round has no measured round: its steps per round times its step
    frame = ok[cols].assign(round_s=measured.fillna(step * per.fillna(1.0)), steps_per_round=per.fillna(1.0))
    return frame.groupby(cols, dropna=False, sort=True)[["round_s", "steps_per_round"]].median().reset_index()


def auto_batch(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell of `batch_size` auto (`cols`): `chosen`, the per-rank batch it settled on (median over
    its ok runs), `tried` (one run's list) and `method` (how it judged what fits)."""
    empty = pd.DataFrame(columns=[*cols, "chosen", "tried", "method"])
    if "batch_size" not in runs or "extra_auto_batch" not in runs:
        return empty
    ok = runs[(runs["status"] == "ok") & (runs["batch_size"].astype(str) == "auto")]
    if ok.empty:
        return empty
    frame = ok[cols].assign(chosen=pd.to_numeric(ok["extra_auto_batch"], errors="coerce"),
                            tried=ok.get("extra_auto_batch_tried", pd.Series("", index=ok.index)).astype(str),
                            method=ok.get("extra_auto_batch_method", pd.Series("", index=ok.index)).astype(str))  # fmt: skip
    return frame.groupby(cols, dropna=False, sort=True).agg(chosen=("chosen", "median"), tried=("tried", "first"),
                                                            method=("method", "first")).reset_index()  # fmt: skip
