"""The per-cell statistics of a comparison of two result sets (NEW against BASE).

What is compared (COMPARE_METRICS: throughput, step time, exposed communication per step, epoch
time, speedup) and the verdict names; how the rows of the two sides are matched (grid values
normalised, so 2, 2.0 and "2" are one key) and each cell's speedup baseline found; per matched
cell and metric, the ratio NEW/BASE of the geometric means with a Welch-Satterthwaite t-interval
on the difference of the mean logs, widened by the between-job noise (JOB_NOISE), the verdict the
interval alone decides, and the gate rule. `analysis.compare` builds the comparison from these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special  # the t distribution's functions: scipy.stats would add 0.55 s to every import

from ddpbench.analysis.comparison import Verdict, verdict_of
from ddpbench.analysis.health import THROUGHPUT, likely_causes, timed_runs
from ddpbench.analysis.intervals import (
    LEVEL, Interval, add_variance, between_group_parts, log_t_interval, numeric_values, rel_halfwidth,
)
from ddpbench.analysis.tables import BASELINE_STRATEGY, IRRELEVANT_AT_BASELINE, LAUNCH_AXES, TIME
from ddpbench.core.run_record import Env

# Between-job noise: the standard deviation of a cell's log value from one job to another on the
# same machine, beyond what its repeats inside one job show (their interval cannot: they share
# the job's state of the machine - clocks, caches, other tenants, thermal). Two runs of the
# unchanged default main job here differed by 2-8 % per cell with within-job intervals of about
# +-3 %, so 82 % of cell x metric pairs compared as "no detectable difference" without it.
# 0.03 is what those pairs imply (docs/compare.md: how to measure it for another machine). Each
# cell mean in a ratio carries it: twice for NEW/BASE, four times for a ratio of speedups.
JOB_NOISE = 0.03
# The most between-job noise an estimate from the data may put in the intervals (per side). The
# gate judges slowdowns of a few percent; two jobs that differ by more than this say the data
# (or a crafted side: two disagreeing jobs) is not fit to judge them. An estimate above it is
# flagged, the intervals use the cap, and the gate answers "cannot judge" instead of passing.
JOB_NOISE_CAP = 0.10

# Why a row is not compared (its verdict column; a compared row's is a comparison.Verdict of NEW against
# BASE: FASTER, NEW is better whichever way the metric points).
NO_RUNS = "not compared: no ok run on {side}"
NOT_POSITIVE = "not compared: a zero value on a side (no communication)"
ONLY = "only in {side}"
NONE_OK = "not compared: no ok run with timed steps on either side"


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    higher_is_better: bool
    column: str  # the runs.csv column it is computed from
    per: str | None = None  # divided by this column (a total over timed steps -> per step)


COMPARE_METRICS = [
    Metric("samples_per_s", "throughput [samples/s]", True, "samples_per_s"),
    Metric("step_time_median_s", "step time [s]", False, "step_time_median_s"),
    Metric("exposed_comm_s", "exposed communication per step [s]", False, "phase_exposed_comm_s", "timed_steps"),
    Metric("epoch_time_s", "epoch time [s]", False, TIME),
    Metric("speedup", "speedup", True, TIME),  # S = T_baseline / T_cell, each side its own baseline
]
BY_NAME = {m.name: m for m in COMPARE_METRICS}


# -- verdicts -----------------------------------------------------------------------------------


def change_verdict(iv: Interval, higher_is_better: bool) -> Verdict:
    """Faster or slower only when the interval of NEW/BASE excludes 1; never by the point value.
    FASTER: NEW is better (a higher throughput, a shorter step)."""
    v = verdict_of(iv.low, iv.high)
    return v if higher_is_better else v.turned()


def slowdown_factor(ratio: float, higher_is_better: bool) -> float:
    """How many times longer NEW takes than BASE by this metric (time ratio − 1; > 0 is slower):
    for a time t_new/t_base − 1, for a rate (throughput, speedup) base/new − 1. So throughput and
    epoch time, which are one quantity, give the same slowdown."""
    return (1 / ratio if higher_is_better else ratio) - 1


# -- matching -----------------------------------------------------------------------------------


def _norm(v) -> str:
    """A grid value as a key: numbers written the same on both sides (2, 2.0 and "2" are one world
    size; a column read as float because another row is empty must not split cells), else str."""
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        return _norm(f) if v.strip().lower() not in ("nan", "inf", "-inf", "infinity") else v
    if isinstance(v, (bool, np.bool_)):
        return str(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        f = float(v)
        if np.isnan(f):
            return "nan"
        return str(int(f)) if f.is_integer() and abs(f) < 1e15 else repr(f)
    return "nan" if v is None or v is pd.NA else str(v)


def _keys(df: pd.DataFrame, cols: list[str]) -> list[tuple]:
    """Per row, the normalised key of `cols` (each column's distinct values normalised once)."""
    if not cols:
        return [()] * len(df)
    parts = [df[c].map({v: _norm(v) for v in pd.unique(df[c])} if df[c].notna().all() else _norm) for c in cols]
    return list(zip(*[p.tolist() for p in parts]))


def _groups(df: pd.DataFrame, cols: list[str]) -> dict[tuple, np.ndarray]:
    """key -> positions of its rows in `df`, in first-seen order."""
    out: dict[tuple, list[int]] = {}
    for i, k in enumerate(_keys(df, cols)):
        out.setdefault(k, []).append(i)
    return {k: np.asarray(v) for k, v in out.items()}


def _metric_array(runs: pd.DataFrame, metric: Metric) -> np.ndarray:
    """The metric per row as floats (NaN where absent); exposed communication per timed step."""
    if metric.column not in runs:
        return np.full(len(runs), np.nan)
    x = pd.to_numeric(runs[metric.column], errors="coerce").to_numpy(dtype=float)
    if metric.per:
        per = pd.to_numeric(runs[metric.per], errors="coerce").to_numpy(dtype=float) if metric.per in runs else np.nan
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(per > 0, x / per, np.nan)
    return x


class Side:
    """One result set prepared for matching: normalised cell keys, each cell's rows, each metric as an
    array, the rows that count (ok with timed steps) and each cell's speedup baseline."""

    def __init__(self, runs: pd.DataFrame, cols: list[str], baseline_strategy: str):
        self.runs = runs.reset_index(drop=True)
        self.cells = _groups(self.runs, cols)
        self.axis_values = self.runs[cols].to_numpy(dtype=object)
        used = timed_runs(self.runs[self.runs["status"] == "ok"])
        self.used_mask = np.zeros(len(self.runs), bool)
        self.used_mask[used.index.to_numpy()] = True
        self.values = {m.name: _metric_array(self.runs, m) for m in COMPARE_METRICS}
        self.baseline = baselines(self.runs, self.used_mask, cols, baseline_strategy)

    def used(self, key) -> np.ndarray:
        rows = self.cells.get(key, np.array([], int))
        return rows[self.used_mask[rows]]


def baselines(runs: pd.DataFrame, used: np.ndarray, cols: list[str], baseline_strategy: str = BASELINE_STRATEGY) -> dict:
    """Per cell key: (positions of its baseline's used runs, kind) as analysis.speedup_table chooses
    them (`baseline_strategy` at p = 1 with every other axis equal, relaxed over the settings that
    cannot matter to it, else the strategy's own p = 1 cell), or None when the cell is its own
    baseline. The candidate order is a copy of speedup_table's, which does not expose the runs it used."""
    if TIME not in runs or "world_size" not in cols or not used.any():
        return {}
    other = [c for c in cols if c not in ("strategy", *LAUNCH_AXES)]
    relaxed = [c for c in other if c not in IRRELEVANT_AT_BASELINE]
    own_cols = [c for c in cols if c not in LAUNCH_AXES]
    p1 = used & (pd.to_numeric(runs["world_size"], errors="coerce").to_numpy() == 1)
    strategy = runs["strategy"].astype(str).to_numpy() if "strategy" in runs else None
    single = p1 & (strategy == baseline_strategy) if strategy is not None else p1
    candidates = []
    for by, mask, kind in ((other, single, baseline_strategy), (relaxed, single, baseline_strategy), (own_cols, p1, "own p=1")):
        index = {k: v for k, v in _groups(runs[mask], by).items()} if mask.any() else {}
        positions = np.flatnonzero(mask)
        candidates.append((by, {k: positions[v] for k, v in index.items()}, kind))
    out = {}
    where = {c: i for i, c in enumerate(cols)}
    for key in set(_keys(runs[used], cols)):
        found = [(index[k], kind) for by, index, kind in candidates if (k := tuple(key[where[c]] for c in by)) in index]
        if not found:
            continue
        rows, kind = found[0]
        is_self = key[where["world_size"]] == "1" and (
            kind == "own p=1" or ("strategy" in where and key[where["strategy"]] == baseline_strategy))
        out[key] = None if is_self else (rows, kind)
    return out


# -- intervals ---------------------------------------------------------------------------------


def _welch_parts(logs: list[np.ndarray], signs: list[int]) -> tuple[float, float, float]:
    """(Σ sign·mean, standard error, Welch–Satterthwaite degrees of freedom, Hsu's min(n) − 1 where the
    groups' counts differ) of a linear combination of independent group means; se and dof NaN when a group has fewer than 2 values."""
    d = float(sum(s * y.mean() for s, y in zip(signs, logs)))
    if any(len(y) < 2 for y in logs):
        return d, np.nan, np.nan
    v = [y.var(ddof=1) / len(y) for y in logs]
    total = sum(v)
    if total == 0:
        return d, 0.0, np.inf
    dof = float(total**2 / sum(vi**2 / (len(y) - 1) for vi, y in zip(v, logs)))
    varying = [len(y) for vi, y in zip(v, logs) if vi > 0]
    # Unequal counts among the groups that vary: Hsu's min(n) - 1 (analysis.intervals.welch_halfwidth says why).
    return d, float(np.sqrt(total)), dof if len(set(varying)) <= 1 else min(dof, min(varying) - 1.0)


def welch_log_sum(groups: list, signs: list[int], level: float = LEVEL) -> Interval:
    """exp(Σ sign_i · mean(log x_i)) with the Welch–Satterthwaite t-interval of that linear
    combination of independent means: variance Σ s_i²/n_i, degrees of freedom
    (Σ v_i)² / Σ v_i²/(n_i − 1). With two groups and signs (+1, −1) it is analysis.welch_log_ratio
    (a test pins that); with four it is the ratio of two speedups (each a ratio of two cells' times)."""
    logs = [np.log(numeric_values(g)) for g in groups]
    if any(len(y) == 0 for y in logs):
        return Interval(np.nan)
    d, se, dof = _welch_parts(logs, signs)
    if np.isnan(se):
        return Interval(float(np.exp(d)))
    half = float(special.stdtrit(dof, 0.5 + level / 2)) * se if se > 0 else 0.0
    return Interval(float(np.exp(d)), float(np.exp(d - half)), float(np.exp(d + half)), level)


def _side_stability(side: Side, rows: np.ndarray, max_rel_ci: float) -> tuple[bool, str]:
    """analysis.stability of one side of a cell, from the arrays; its causes only when unstable."""
    metric = next((m for m in THROUGHPUT if m in side.runs), None)
    if metric is None or len(rows) < 2:
        return False, ""
    rel = rel_halfwidth(log_t_interval(side.values[metric][rows]))
    if np.isnan(rel) or rel <= max_rel_ci:
        return False, ""
    return True, likely_causes(side.runs.iloc[rows])


def _compare_metric(metric: Metric, b: Side, n: Side, key) -> dict:
    """One row of the table for a matched cell: NEW/BASE of `metric`, its Welch parts and verdict
    (the t quantiles of all rows are taken at once afterwards)."""
    rb, rn = b.used(key), n.used(key)
    if metric.name == "speedup":
        blb, bln = b.baseline.get(key), n.baseline.get(key)
        if blb is None or bln is None or not len(rb) or not len(rn):
            return {}
        v = [n.values[metric.name]] * 2 + [b.values[metric.name]] * 2
        raw = [x[r][~np.isnan(x[r])] for x, r in zip(v, (bln[0], rn, blb[0], rb))]
        if any(len(x) == 0 or (x <= 0).any() for x in raw):
            return {}
        logs = [np.log(x) for x in raw]
        d, se, dof = _welch_parts(logs, [1, -1, -1, 1])
        vb, vn = np.exp(logs[2].mean() - logs[3].mean()), np.exp(logs[0].mean() - logs[1].mean())
        nb, nn = min(len(logs[2]), len(logs[3])), min(len(logs[0]), len(logs[1]))
    else:
        xb, xn = b.values[metric.name][rb], n.values[metric.name][rn]
        xb, xn = xb[~np.isnan(xb)], xn[~np.isnan(xn)]
        nb, nn = len(xb), len(xn)
        if nb == 0 and nn == 0:
            return {}
        if nb == 0 or nn == 0:
            return dict(n_base=nb, n_new=nn, verdict=NO_RUNS.format(side="BASE" if nb == 0 else "NEW"))
        if (xb == 0).all() and (xn == 0).all():
            return {}  # nothing to compare (e.g. no communication at p = 1)
        if (xb <= 0).any() or (xn <= 0).any():
            return dict(n_base=nb, n_new=nn, verdict=NOT_POSITIVE)
        lb, ln = np.log(xb), np.log(xn)
        d, se, dof = _welch_parts([ln, lb], [1, -1])
        vb, vn = float(np.exp(lb.mean())), float(np.exp(ln.mean()))
    return dict(n_base=nb, n_new=nn, base=float(vb), new=float(vn), _d=d, _se=se, _dof=dof,
                _terms=4 if metric.name == "speedup" else 2)


JOB_COLUMN = Env.job_id  # runs.csv: the workflow invocation a run belongs to (core.sysinfo.JOB_ID_ENV)
ESTIMATE = "estimate"  # --job-noise estimate


def estimate_job_noise(frames: list[pd.DataFrame], cols: list[str], metric: str = "samples_per_s") -> tuple[float, int]:
    """The between-job standard deviation of a cell's log `metric`, from the cells of `frames` measured
    in two or more jobs (JOB_COLUMN) with 2+ ok runs in each: per cell, the variance of its jobs' mean
    logs less the part the repeats explain (the mean of the within-job variances over runs per job),
    pooled over cells weighted by jobs − 1, negative estimates kept so the pool stays unbiased, then
    floored at 0. (σ_job, cells used); (NaN, 0) without such a cell."""
    num, den, cells = 0.0, 0, 0
    for frame in frames:
        if JOB_COLUMN not in frame or metric not in frame:
            continue
        ok = frame[(frame["status"].astype(str) == "ok") & frame[JOB_COLUMN].notna()]
        values = pd.to_numeric(ok[metric], errors="coerce")
        ok = ok[(values > 0).fillna(False)].assign(_log=np.log(values[values > 0]))
        for _, cell in ok.groupby(cols, dropna=False, sort=False):
            jobs = (g["_log"].to_numpy(float) for _, g in cell.groupby(cell[JOB_COLUMN].astype(str)))
            part, weight = between_group_parts(jobs)
            num, den, cells = num + part, den + weight, cells + (weight > 0)
    if not den:
        return np.nan, 0
    return float(np.sqrt(max(0.0, num / den))), cells


def with_job_noise(se, dof, terms, job_noise: float):
    """The standard error and Welch-Satterthwaite degrees of freedom of a log ratio of `terms` cell means
    (2: NEW/BASE of one cell; 4: a ratio of speedups) once every cell mean carries its job's effect of
    standard deviation `job_noise` (a known variance, infinite degrees of freedom):
    se² + terms·job_noise², dof = (se² + terms·job_noise²)² / (se⁴/dof)."""
    se = np.asarray(se, float)
    total, dof = add_variance(se**2, dof, np.asarray(terms, float) * job_noise**2)
    return np.sqrt(total), dof


def finish_intervals(rows: list[dict], level: float = LEVEL, job_noise: float = JOB_NOISE) -> None:
    """Interval, verdict and slowdown of every compared row, with one vectorised t quantile."""
    todo = [r for r in rows if "_d" in r]
    if not todo:
        return
    d = np.array([r["_d"] for r in todo])
    se, dof = with_job_noise([r["_se"] for r in todo], [r["_dof"] for r in todo], [r["_terms"] for r in todo], job_noise)
    with np.errstate(invalid="ignore"):
        q = special.stdtrit(np.where(np.isfinite(dof), dof, 1e9), 0.5 + level / 2)
    half = np.where(se > 0, q * se, 0.0)
    for r, di, hi, s in zip(todo, d, half, se):
        metric = BY_NAME[r["metric"]]
        has = not np.isnan(s)
        iv = Interval(float(np.exp(di)), *((float(np.exp(di - hi)), float(np.exp(di + hi)), level) if has else ()))
        r.update(ratio=iv.estimate, ratio_ci_low=iv.low, ratio_ci_high=iv.high, ratio_ci_level=iv.level,
                 slowdown=slowdown_factor(iv.estimate, metric.higher_is_better),
                 verdict=change_verdict(iv, metric.higher_is_better))  # fmt: skip
        for k in ("_d", "_se", "_dof"):  # _terms stays for the gate's reasons (no column of the table)
            del r[k]


def gate_bound(metric: Metric, threshold: float) -> float:
    """The ratio NEW/BASE at the threshold: 1 + threshold for a time, 1 / (1 + threshold) for a rate."""
    return 1 / (1 + threshold) if metric.higher_is_better else 1 + threshold


def gate_failed(row: dict, threshold: float) -> bool:
    """The documented gate rule: slower by more than `threshold` with the whole interval beyond it
    (so the interval excludes no change too). For a time, ci_low > 1 + threshold; for a rate
    (throughput, speedup), ci_high < 1 / (1 + threshold)."""
    metric = BY_NAME[row["metric"]]
    lo, hi = row.get("ratio_ci_low", np.nan), row.get("ratio_ci_high", np.nan)
    if row.get("verdict") != Verdict.SLOWER or pd.isna(lo) or pd.isna(hi):
        return False
    bound = gate_bound(metric, threshold)
    return bool(hi < bound) if metric.higher_is_better else bool(lo > bound)


def gate_unjudged(row: dict, threshold: float, job_noise: float, level: float = LEVEL) -> str:
    """Why the gate cannot judge a gated row that did not fail it ('' where it can): a pass needs
    the interval's slow end within the threshold, so a row without an interval, an unstable one
    (its repeats spread beyond --max-rel-ci: the interval of a few of them is not to be trusted)
    and one whose interval reaches past the threshold (however wide the between-job noise made
    it) are neither a pass nor a fail. The reason says what would decide it."""
    if gate_failed(row, threshold):
        return ""
    lo, hi, ratio = (row.get(k, np.nan) for k in ("ratio_ci_low", "ratio_ci_high", "ratio"))
    if pd.isna(lo) or pd.isna(hi) or pd.isna(ratio):
        return f"no interval ({row.get('verdict') or 'not compared'})"
    metric = BY_NAME[row["metric"]]
    bound = gate_bound(metric, threshold)
    reaches = lo < bound if metric.higher_is_better else hi > bound
    why = [f"unstable ({row['unstable_cause']})"] if row.get("unstable") else []
    if reaches:
        slow, fast = sorted(slowdown_factor(x, metric.higher_is_better) for x in (lo, hi))[::-1]
        why.append(f"a slowdown of {100 * fast:+.1f} % to {100 * slow:+.1f} %, past the {100 * threshold:g} % threshold; "
                   + _what_would_decide(row, bound, job_noise, level))  # fmt: skip
    return "; ".join(why)


def _what_would_decide(row: dict, bound: float, job_noise: float, level: float) -> str:
    """How narrow the interval must be for the gate to judge the row, and what would make it so:
    more repeats (the repeats' part of it shrinks as 1/sqrt(n)), unless the between-job noise
    alone is wider (then only measuring both sides in one job, or a larger threshold)."""
    q = float(special.ndtri(0.5 + level / 2))
    need = abs(np.log(bound) - np.log(row["ratio"]))  # the half-width (log) that would keep the interval on one side
    now = (np.log(row["ratio_ci_high"]) - np.log(row["ratio_ci_low"])) / 2
    outcome = "pass" if (row["ratio"] > bound) == BY_NAME[row["metric"]].higher_is_better else "fail"
    text = f"to {outcome}, at most {_pct(need)} around the estimate (now {_pct(now)})"
    terms = row.get("_terms", 2)
    floor = q * np.sqrt(terms) * job_noise
    if floor >= need:
        return text + f", less than the between-job noise alone ({_pct(floor)} at --job-noise {job_noise:g})"
    more = (now**2 - floor**2) / (need**2 - floor**2)  # the repeats' part shrinks as 1/n
    return text + f": about {math.ceil(10 * more) / 10:.1f}x the repeats per side"


def _pct(log_halfwidth: float) -> str:
    return f"±{100 * np.expm1(log_halfwidth):.3g} %"


# -- the rows of a comparison -------------------------------------------------------------------


def cell_rows(b: Side, n: Side, cols: list[str], names: dict[str, str], metrics: list[Metric],
              max_rel_ci: float) -> list[dict]:  # fmt: skip
    """Every cell of either side in sorted order: one row per metric both sides measured when the
    cell is on both (NEW/BASE's Welch parts, which finish_intervals turns into the interval and
    verdict), else one row saying why it is not compared (on one side only, or without an ok run).
    `names`: what the table calls each side ("base"/"new" -> e.g. the paths as given)."""
    sides = {"base": b, "new": n}
    rows = []
    for key in sorted(dict.fromkeys([*b.cells, *n.cells]), key=_sort_key):
        present = [s for s in ("base", "new") if key in sides[s].cells]
        cell = dict(zip(cols, sides[present[0]].axis_values[sides[present[0]].cells[key][0]]))
        if len(present) == 1:
            side = sides[present[0]]
            name = names[present[0]]
            rows.append(dict(cell, present=name, metric="", metric_label=f"{len(side.cells[key])} run(s) in {name}: "
                             f"{_statuses(side, key)}", verdict=ONLY.format(side=name), gate_failed=False))  # fmt: skip
            continue
        before = len(rows)
        pair = {}
        if len(b.used(key)) and len(n.used(key)):
            causes = [f"{names[s]}: {c}" for s in ("base", "new")
                      for unstable, c in [_side_stability(sides[s], sides[s].used(key), max_rel_ci)] if unstable]  # fmt: skip
            pair = dict(unstable=bool(causes), unstable_cause="; ".join(causes))
        for metric in metrics:
            got = _compare_metric(metric, b, n, key)
            if not got:
                continue
            if "verdict" in got and got["verdict"].startswith("not compared: no ok run"):
                got["verdict"] = NO_RUNS.format(side=names["base"] if got["n_base"] == 0 else names["new"])
            rows.append(dict(cell, present="both", metric=metric.name, metric_label=metric.label, **got, **pair))
        if len(rows) == before:  # on both sides, but no side has a value (every run failed, skipped, ...)
            statuses = "; ".join(f"{names[s]}: {_statuses(sides[s], key)}" for s in ("base", "new"))
            rows.append(dict(cell, present="both", metric="", metric_label=statuses, verdict=NONE_OK, gate_failed=False))
    return rows


def _statuses(side: Side, key) -> str:
    return ", ".join(f"{k} {s}" for s, k in side.runs["status"].iloc[side.cells[key]].value_counts().items())


def _sort_key(key: tuple) -> tuple:
    return tuple((0, float(v), "") if _is_number(v) else (1, 0.0, v) for v in key)


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False
