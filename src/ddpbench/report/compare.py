"""Compare two result sets: did a change make training faster or slower, and can we tell?

`python -m ddpbench.report.compare BASE NEW` (also `ddpbench compare BASE NEW`): BASE and NEW are
result folders (holding aggregate/runs.csv) or runs.csv files. It prints what differs between
the two sides' recorded environments first, then, per cell present on both sides (matched on
the grid keys of `analysis.axes`: every cell parameter but seed, plus world size and nodes) and
per metric (throughput, step time, exposed communication per step, epoch time, speedup), the
ratio NEW/BASE of the geometric means over repeats with a 95 % Welch t-interval on the
difference of the mean logs -- the interval analysis.py uses for strategy-vs-strategy ratios --
and a verdict decided by the interval alone: faster, slower, or no detectable difference.
Cells on one side only are listed. It writes comparison.csv and a self-contained
comparison.html into --out (atomically; nothing is written when an input is bad).

The gate `--fail-on-slowdown 5%` (repeatable; `METRIC=5%` for one metric) exits 1 when a matched
cell is slower by more than the threshold with the whole interval beyond it. Bad input (a
missing or corrupt table, no runs, no common cells, different columns) exits 2 with a message
naming the path and the problem. docs/compare.md explains the statistics and the gate.

For embedding (e.g. a report section): `compare_frames(base_runs, new_runs)` or
`compare_paths(BASE, NEW)` return a `Comparison` with `.table` (comparison.csv) and
`.provenance` (the environment diff), without writing anything.
"""

from __future__ import annotations

import argparse
import io
import pathlib
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ddpbench import REPO_ROOT
from ddpbench import analysis as A
from ddpbench.core import safe_io

EXIT_GATE = 1
EXIT_INPUT = 2
# Between-job noise: the standard deviation of a cell's log value from one job to another on the
# same machine, beyond what its repeats inside one job show (their interval cannot: they share
# the job's state of the machine - clocks, caches, other tenants, thermal). Two runs of the
# unchanged default main job here differed by 2-8 % per cell with within-job intervals of about
# +-3 %, so 82 % of cell x metric pairs compared as "no detectable difference" without it.
# 0.03 is what those pairs imply (docs/compare.md: how to measure it for another machine). Each
# cell mean in a ratio carries it: twice for NEW/BASE, four times for a ratio of speedups.
JOB_NOISE = 0.03

FASTER, SLOWER = "faster", "slower"
NO_DIFFERENCE = A.NO_DIFFERENCE  # "no detectable difference"
NO_INTERVAL = "no interval (fewer than 2 repeats on a side)"
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


METRICS = [
    Metric("samples_per_s", "throughput [samples/s]", True, "samples_per_s"),
    Metric("step_time_median_s", "step time [s]", False, "step_time_median_s"),
    Metric("exposed_comm_s", "exposed communication per step [s]", False, "phase_exposed_comm_s", "timed_steps"),
    Metric("epoch_time_s", "epoch time [s]", False, A.TIME),
    Metric("speedup", "speedup", True, A.TIME),  # S = T_baseline / T_cell, each side its own baseline
]
BY_NAME = {m.name: m for m in METRICS}
# What a bare `--fail-on-slowdown 5%` gates: the metrics that say how long training takes.
GATED_BY_DEFAULT = ("samples_per_s", "step_time_median_s", "epoch_time_s")

TABLE_COLUMNS = [
    "metric", "metric_label", "n_base", "n_new", "base", "new", "ratio", "ratio_ci_low", "ratio_ci_high",
    "ratio_ci_level", "slowdown", "verdict", "gate_threshold", "gate_failed", "unstable", "unstable_cause",
]  # fmt: skip


class InputError(Exception):
    """A result set that cannot be compared: the message names the path and the problem."""

    def __init__(self, path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


# -- reading -----------------------------------------------------------------------------------


def runs_csv(path) -> pathlib.Path:
    """BASE/NEW as given: a folder with aggregate/runs.csv (or runs.csv), or a runs.csv file."""
    p = pathlib.Path(path)
    if p.is_dir():
        for candidate in (p / "aggregate" / "runs.csv", p / "runs.csv"):
            if candidate.is_file():
                return candidate
        raise InputError(p, "no aggregate/runs.csv in this folder (run the workflow up to `aggregate` first)")
    if not p.exists():
        raise InputError(p, "no such file or folder")
    if not p.is_file():
        raise InputError(p, "not a regular file or folder")
    return p


def read_side(path) -> tuple[pd.DataFrame, pathlib.Path]:
    """The runs table of one side, normalised as the report reads it (analysis.load_runs_frame)."""
    csv = runs_csv(path)
    try:
        raw = pd.read_csv(csv)
    except pd.errors.EmptyDataError:
        raise InputError(csv, "empty file: no runs") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise InputError(csv, f"not a readable CSV ({type(err).__name__}: {_line(err)})") from None
    except OSError as err:
        raise InputError(csv, f"cannot read it ({err.strerror or err})") from None
    if raw.empty:
        raise InputError(csv, "no runs (a header without rows)")
    if "world_size" not in raw or not A.axes(raw):
        raise InputError(csv, "not a runs table: no grid columns (strategy, world_size, ...)")
    if not any(m.column in raw or (m.column == A.TIME and "samples_per_s" in raw) for m in METRICS):
        raise InputError(csv, "no timing column (samples_per_s, step_time_median_s, epoch_time_s)")
    for col in {m.column for m in METRICS} | {"timed_steps"}:
        if col in raw and raw[col].notna().any() and pd.to_numeric(raw[col], errors="coerce").isna().gt(raw[col].isna()).any():
            raise InputError(csv, f"column {col} holds values that are not numbers (a corrupt table?)")
    runs = A.load_runs_frame(raw)
    if A.timed_runs(runs[runs["status"] == "ok"]).empty:
        statuses = ", ".join(f"{n} {s}" for s, n in runs["status"].value_counts().items())
        raise InputError(csv, f"no ok run with timed steps ({len(runs)} rows: {statuses})")
    return runs, csv


def _line(err: Exception) -> str:
    return str(err).strip().splitlines()[0][:200] if str(err).strip() else "unreadable"


def check_schemas(base: pd.DataFrame, new: pd.DataFrame, base_path, new_path) -> None:
    """Both sides must identify cells by the same columns and carry the same metric columns."""
    for cols, what in ((A.axes, "grid column"), (_metric_columns, "metric column")):
        a, b = set(cols(base)), set(cols(new))
        if a - b:
            raise InputError(new_path, f"lacks the {what}(s) {', '.join(sorted(a - b))} that {base_path} has: "
                                       "the result sets have different schemas")  # fmt: skip
        if b - a:
            raise InputError(base_path, f"lacks the {what}(s) {', '.join(sorted(b - a))} that {new_path} has: "
                                        "the result sets have different schemas")  # fmt: skip


def _metric_columns(runs: pd.DataFrame) -> list[str]:
    return [c for c in dict.fromkeys(m.column for m in METRICS) if c in runs]


# -- intervals ----------------------------------------------------------------------------------


def verdict(iv: A.Interval, higher_is_better: bool) -> str:
    """Faster or slower only when the interval of NEW/BASE excludes 1; never by the point value."""
    if np.isnan(iv.low) or np.isnan(iv.high):
        return NO_INTERVAL
    up = iv.low > 1
    down = iv.high < 1
    if not (up or down):
        return NO_DIFFERENCE
    return FASTER if up == higher_is_better else SLOWER


def slowdown_factor(ratio: float, higher_is_better: bool) -> float:
    """How many times longer NEW takes than BASE by this metric (time ratio − 1; > 0 is slower):
    for a time t_new/t_base − 1, for a rate (throughput, speedup) base/new − 1. So throughput and
    epoch time, which are one quantity, give the same slowdown."""
    return (1 / ratio if higher_is_better else ratio) - 1


# -- the comparison -----------------------------------------------------------------------------


@dataclass
class Comparison:
    base_name: str
    new_name: str
    axes: list[str]
    label_axes: list[str]  # the axes that vary (how cells are named)
    table: pd.DataFrame  # comparison.csv: one row per matched cell and metric, one per one-sided cell
    provenance: pd.DataFrame  # label, column, base, new, differs
    gates: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # what may make a difference not the change's
    job_noise: float = JOB_NOISE  # the between-job component in every interval (0: repeats only)

    @property
    def matched(self) -> pd.DataFrame:
        return self.table[self.table["metric"] != ""]

    @property
    def unmatched(self) -> pd.DataFrame:
        """Cells not compared: on one side only, or on both without an ok run."""
        return self.table[self.table["metric"] == ""]

    @property
    def one_sided(self) -> pd.DataFrame:
        return self.table[self.table["present"] != "both"]

    @property
    def failed_gate(self) -> pd.DataFrame:
        return self.table[self.table["gate_failed"].astype(bool)]

    def counts(self) -> pd.DataFrame:
        """Per metric: n faster, slower, no detectable difference, not compared."""
        m = self.matched
        rows = []
        for metric in METRICS:
            v = m.loc[m["metric"] == metric.name, "verdict"]
            if v.empty:
                continue
            rows.append(dict(metric=metric.name, label=metric.label, faster=int((v == FASTER).sum()),
                             slower=int((v == SLOWER).sum()), undecided=int((v == NO_DIFFERENCE).sum()),
                             not_compared=int((~v.isin([FASTER, SLOWER, NO_DIFFERENCE])).sum())))  # fmt: skip
        return pd.DataFrame(rows, columns=["metric", "label", "faster", "slower", "undecided", "not_compared"])


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


def _welch_parts(logs: list[np.ndarray], signs: list[int]) -> tuple[float, float, float]:
    """(Σ sign·mean, standard error, Welch–Satterthwaite degrees of freedom) of a linear combination of
    independent group means; se and dof NaN when a group has fewer than 2 values."""
    d = float(sum(s * y.mean() for s, y in zip(signs, logs)))
    if any(len(y) < 2 for y in logs):
        return d, np.nan, np.nan
    v = [y.var(ddof=1) / len(y) for y in logs]
    total = sum(v)
    if total == 0:
        return d, 0.0, np.inf
    return d, float(np.sqrt(total)), float(total**2 / sum(vi**2 / (len(y) - 1) for vi, y in zip(v, logs)))


def welch_log_sum(groups: list, signs: list[int], level: float = A.LEVEL) -> A.Interval:
    """exp(Σ sign_i · mean(log x_i)) with the Welch–Satterthwaite t-interval of that linear
    combination of independent means: variance Σ s_i²/n_i, degrees of freedom
    (Σ v_i)² / Σ v_i²/(n_i − 1). With two groups and signs (+1, −1) it is analysis.welch_log_ratio
    (a test pins that); with four it is the ratio of two speedups (each a ratio of two cells' times)."""
    logs = [np.log(A._clean(g)) for g in groups]
    if any(len(y) == 0 for y in logs):
        return A.Interval(np.nan)
    d, se, dof = _welch_parts(logs, signs)
    if np.isnan(se):
        return A.Interval(float(np.exp(d)))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se if se > 0 else 0.0
    return A.Interval(float(np.exp(d)), float(np.exp(d - half)), float(np.exp(d + half)), level)


class _Side:
    """One result set prepared for matching: normalised cell keys, each cell's rows, each metric as an
    array, the rows that count (ok with timed steps) and each cell's speedup baseline."""

    def __init__(self, runs: pd.DataFrame, cols: list[str], baseline_strategy: str):
        self.runs = runs.reset_index(drop=True)
        self.cells = _groups(self.runs, cols)
        self.axis_values = self.runs[cols].to_numpy(dtype=object)
        used = A.timed_runs(self.runs[self.runs["status"] == "ok"])
        self.used_mask = np.zeros(len(self.runs), bool)
        self.used_mask[used.index.to_numpy()] = True
        self.values = {m.name: _metric_array(self.runs, m) for m in METRICS}
        self.baseline = baselines(self.runs, self.used_mask, cols, baseline_strategy)

    def used(self, key) -> np.ndarray:
        rows = self.cells.get(key, np.array([], int))
        return rows[self.used_mask[rows]]


def baselines(runs: pd.DataFrame, used: np.ndarray, cols: list[str], baseline_strategy: str = A.BASELINE_STRATEGY) -> dict:
    """Per cell key: (positions of its baseline's used runs, kind) as analysis.speedup_table chooses
    them (`baseline_strategy` at p = 1 with every other axis equal, relaxed over the settings that
    cannot matter to it, else the strategy's own p = 1 cell), or None when the cell is its own
    baseline. The candidate order is a copy of speedup_table's, which does not expose the runs it used."""
    if A.TIME not in runs or "world_size" not in cols or not used.any():
        return {}
    other = [c for c in cols if c not in ("strategy", *A.LAUNCH_AXES)]
    relaxed = [c for c in other if c not in A.IRRELEVANT_AT_BASELINE]
    own_cols = [c for c in cols if c not in A.LAUNCH_AXES]
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


def _stability(side: _Side, rows: np.ndarray, max_rel_ci: float) -> tuple[bool, str]:
    """analysis.stability of one side of a cell, from the arrays; its causes only when unstable."""
    metric = next((m for m in A.THROUGHPUT if m in side.runs), None)
    if metric is None or len(rows) < 2:
        return False, ""
    rel = A.rel_halfwidth(A.log_t_interval(side.values[metric][rows]))
    if np.isnan(rel) or rel <= max_rel_ci:
        return False, ""
    return True, A.likely_causes(side.runs.iloc[rows])


def _compare_metric(metric: Metric, b: _Side, n: _Side, key) -> dict:
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


def with_job_noise(se, dof, terms, job_noise: float):
    """The standard error and Welch-Satterthwaite degrees of freedom of a log ratio of `terms` cell means
    (2: NEW/BASE of one cell; 4: a ratio of speedups) once every cell mean carries its job's effect of
    standard deviation `job_noise` (a known variance, infinite degrees of freedom):
    se² + terms·job_noise², dof = (se² + terms·job_noise²)² / (se⁴/dof)."""
    se, dof = np.asarray(se, float), np.asarray(dof, float)
    extra = np.asarray(terms, float) * job_noise**2
    total = se**2 + extra
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = np.where(se > 0, total**2 / (se**4 / dof), np.inf) if job_noise else dof
    return np.sqrt(total), dof


def _finish_intervals(rows: list[dict], level: float = A.LEVEL, job_noise: float = JOB_NOISE) -> None:
    """Interval, verdict and slowdown of every compared row, with one vectorised t quantile."""
    todo = [r for r in rows if "_d" in r]
    if not todo:
        return
    d = np.array([r["_d"] for r in todo])
    se, dof = with_job_noise([r["_se"] for r in todo], [r["_dof"] for r in todo], [r["_terms"] for r in todo], job_noise)
    with np.errstate(invalid="ignore"):
        q = stats.t.ppf(0.5 + level / 2, np.where(np.isfinite(dof), dof, 1e9))
    half = np.where(se > 0, q * se, 0.0)
    for r, di, hi, s in zip(todo, d, half, se):
        metric = BY_NAME[r["metric"]]
        has = not np.isnan(s)
        iv = A.Interval(float(np.exp(di)), *((float(np.exp(di - hi)), float(np.exp(di + hi)), level) if has else ()))
        r.update(ratio=iv.estimate, ratio_ci_low=iv.low, ratio_ci_high=iv.high, ratio_ci_level=iv.level,
                 slowdown=slowdown_factor(iv.estimate, metric.higher_is_better),
                 verdict=verdict(iv, metric.higher_is_better))  # fmt: skip
        for k in ("_d", "_se", "_dof", "_terms"):
            del r[k]


def gate_failed(row: dict, threshold: float) -> bool:
    """The documented gate rule: slower by more than `threshold` with the whole interval beyond it
    (so the interval excludes no change too). For a time, ci_low > 1 + threshold; for a rate
    (throughput, speedup), ci_high < 1 / (1 + threshold)."""
    metric = BY_NAME[row["metric"]]
    lo, hi = row.get("ratio_ci_low", np.nan), row.get("ratio_ci_high", np.nan)
    if row.get("verdict") != SLOWER or pd.isna(lo) or pd.isna(hi):
        return False
    return bool(hi < 1 / (1 + threshold)) if metric.higher_is_better else bool(lo > 1 + threshold)


def compare_frames(base: pd.DataFrame, new: pd.DataFrame, gates: dict[str, float] | None = None,
                   base_name: str = "BASE", new_name: str = "NEW", max_rel_ci: float = A.MAX_REL_CI,
                   baseline_strategy: str = A.BASELINE_STRATEGY, ignore: Iterable[str] = (),
                   job_noise: float = JOB_NOISE) -> Comparison:  # fmt: skip
    """The comparison of two runs tables (as analysis.load_runs_frame returns them): every cell on
    both sides × every metric both sides measured, plus one row per cell not compared (on one side
    only, or without an ok run). `gates` maps metric -> threshold (0.05 = 5 %). `ignore`: axes left
    out of the matching (the change being judged, e.g. bucket_mb); their values head the provenance.
    `job_noise`: the between-job standard deviation of a log value added to every interval (JOB_NOISE;
    0 when both sides come from one job, e.g. an interleaved variant axis)."""
    if not (0 <= job_noise < 1):
        raise ValueError(f"job_noise must be in [0, 1), not {job_noise!r}")
    gates = dict(gates or {})
    ignore = check_ignored(base, new, ignore)
    cols = [c for c in A.axes(base) if c not in ignore]
    both = pd.concat([base[cols], new[cols]], ignore_index=True)
    label_axes = A.varying(both, cols)
    sides = {"base": _Side(base, cols, baseline_strategy), "new": _Side(new, cols, baseline_strategy)}
    b, n = sides["base"], sides["new"]
    names = {"base": base_name, "new": new_name}
    metrics = [m for m in METRICS if m.column in base and m.column in new]
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
                      for unstable, c in [_stability(sides[s], sides[s].used(key), max_rel_ci)] if unstable]  # fmt: skip
            pair = dict(unstable=bool(causes), unstable_cause="; ".join(causes))
        for metric in metrics:
            got = _compare_metric(metric, b, n, key)
            if not got:
                continue
            if "verdict" in got and got["verdict"].startswith("not compared: no ok run"):
                got["verdict"] = NO_RUNS.format(side=base_name if got["n_base"] == 0 else new_name)
            rows.append(dict(cell, present="both", metric=metric.name, metric_label=metric.label, **got, **pair))
        if len(rows) == before:  # on both sides, but no side has a value (every run failed, skipped, ...)
            statuses = "; ".join(f"{names[s]}: {_statuses(sides[s], key)}" for s in ("base", "new"))
            rows.append(dict(cell, present="both", metric="", metric_label=statuses, verdict=NONE_OK, gate_failed=False))
    _finish_intervals(rows, job_noise=job_noise)
    for row in rows:
        if row["metric"]:
            threshold = gates.get(row["metric"])
            row["gate_threshold"] = threshold if threshold is not None else np.nan
            row["gate_failed"] = threshold is not None and gate_failed(row, threshold)
    table = pd.DataFrame(rows, columns=[*cols, "present", *TABLE_COLUMNS])
    table["metric"] = table["metric"].fillna("")
    for col, empty in (("gate_failed", False), ("unstable", False), ("unstable_cause", "")):
        table[col] = table[col].astype(object).where(table[col].notna(), empty)
    table[["gate_failed", "unstable"]] = table[["gate_failed", "unstable"]].astype(bool)
    return Comparison(base_name, new_name, cols, label_axes, table, provenance_diff(base, new, ignore), gates,
                      load_warnings({base_name: b.runs[b.used_mask], new_name: n.runs[n.used_mask]}), job_noise)


def check_ignored(base: pd.DataFrame, new: pd.DataFrame, ignore: Iterable[str]) -> list[str]:
    """The axes to leave out of the matching; InputError naming one that is no axis of either side."""
    ignore = list(dict.fromkeys(ignore))
    known = set(A.axes(base)) | set(A.axes(new))
    for axis in ignore:
        if axis not in known:
            raise InputError(f"--ignore {axis}", f"not an axis of either result set (axes: {', '.join(sorted(known))})")
    return ignore


def load_warnings(used: dict[str, pd.DataFrame]) -> list[str]:
    """Runs measured on a busy machine (analysis.busy_runs: other processes took more than 10 % of
    the CPU while timed) or oversubscribed, per side: a difference between the sides may be the load."""
    parts = []
    for name, runs in used.items():
        busy, over = int(A.busy_runs(runs).sum()), int(A.oversubscribed_runs(runs).sum())
        if busy:
            frac = pd.to_numeric(runs.get("env_other_cpu_frac"), errors="coerce").max()
            parts.append(f"{name}: {busy} of {len(runs)} runs on a busy machine (other processes took up to "
                         f"{100 * frac:.0f} % of the CPU while timed)")  # fmt: skip
        if over:
            parts.append(f"{name}: {over} of {len(runs)} runs oversubscribed")
    if not parts:
        return []
    return ["; ".join(parts) + ": a difference between the sides may come from the load, not from the change"]


def _statuses(side: _Side, key) -> str:
    return ", ".join(f"{k} {s}" for s, k in side.runs["status"].iloc[side.cells[key]].value_counts().items())


def _sort_key(key: tuple) -> tuple:
    return tuple((0, float(v), "") if _is_number(v) else (1, 0.0, v) for v in key)


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def compare_paths(base, new, gates: dict[str, float] | None = None, **kw) -> Comparison:
    """Read, check and compare two result sets (folders or runs.csv files); InputError when either
    cannot be compared. Names BASE and NEW in the table are the paths as given."""
    (b, bp), (n, np_) = read_side(base), read_side(new)
    check_schemas(b, n, bp, np_)
    cmp = compare_frames(b, n, gates, **kw)
    if cmp.matched.empty:
        raise InputError(f"{bp} and {np_}", f"no cell is in both result sets ({len(cmp.one_sided)} cells, each on one "
                                            "side only: different grids?)" if len(cmp.one_sided) == len(cmp.table)
                                            else "no cell has ok runs on both sides")  # fmt: skip
    cmp.base_path, cmp.new_path = str(bp), str(np_)
    return cmp


# -- provenance ---------------------------------------------------------------------------------

# Read from report.py's provenance rows when it has them (the same labels as the report), else this copy.
try:
    from ddpbench.report.build import PER_RUN, PROVENANCE_ROWS
except Exception:  # pragma: no cover - report.py being rewritten must not stop a comparison
    PROVENANCE_ROWS = [("torch", "env_torch"), ("code fingerprint", "env_code_fingerprint")]
    PER_RUN = ("env_started_utc", "env_ended_utc", "env_command", "env_loadavg_start", "env_loadavg_end",
               "env_other_cpu_s", "env_other_cpu_frac")  # fmt: skip
MEASURED = [("machine load at run start (1-min average)", "env_loadavg_start"),
            ("other processes' share of the CPU while timed", "env_other_cpu_frac")]  # fmt: skip
NOT_RECORDED = "(not recorded)"


def _values(s: pd.Series | None) -> str:
    if s is None:
        return NOT_RECORDED
    vals = []
    for v in pd.unique(s.dropna()):
        vals.append(_num(v) if isinstance(v, (float, np.floating)) else str(v))
    return ", ".join(sorted(vals)) if vals else NOT_RECORDED


def _span(s: pd.Series | None) -> str:
    if s is None:
        return NOT_RECORDED
    x = pd.to_numeric(s, errors="coerce").dropna()
    return NOT_RECORDED if x.empty else f"{_num(x.min())}–{_num(x.max())}" if x.min() != x.max() else _num(x.min())


def _num(x) -> str:
    x = float(x)
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else f"{x:.4g}"


def provenance_diff(base: pd.DataFrame, new: pd.DataFrame, ignored: Iterable[str] = ()) -> pd.DataFrame:
    """Every recorded environment field of either side: label, column, the values of each side
    (all distinct values, sorted), and whether they differ. The axes left out of the matching
    first (they are the change being judged), then the report's provenance rows in its order,
    then any other env_* column; per-run measurements of the machine (load) as ranges, never
    counted as a difference of setup."""
    rows = []
    for col in ignored:
        vb, vn = _values(base.get(col)), _values(new.get(col))
        rows.append(dict(label=f"{col} (not matched on)", column=col, base=vb, new=vn, differs=vb != vn, measured=False))
    known = {c for _, c in PROVENANCE_ROWS} | set(PER_RUN)
    columns = list(PROVENANCE_ROWS)
    if "env_off_lock" in base or "env_off_lock" in new:
        columns.append(("packages off the lock", "env_off_lock"))
    extra = [c for c in dict.fromkeys([*base.columns, *new.columns]) if c.startswith("env_") and c not in known]
    columns += [(c.removeprefix("env_var_").removeprefix("env_"), c) for c in extra]
    for label, col in columns:
        b, n = base.get(col), new.get(col)
        if (b is None or b.isna().all()) and (n is None or n.isna().all()):
            continue
        vb, vn = _values(b), _values(n)
        if col == "env_off_lock":
            vb, vn = (v if v != NOT_RECORDED else "none" for v in (vb, vn))
        rows.append(dict(label=label, column=col, base=vb, new=vn, differs=vb != vn, measured=False))
    for label, col in MEASURED:
        if col in base or col in new:
            rows.append(dict(label=label, column=col, base=_span(base.get(col)), new=_span(new.get(col)),
                             differs=False, measured=True))  # fmt: skip
    started = [_text_range(df) for df in (base, new)]
    if any(started):
        rows.insert(0, dict(label="measured (UTC)", column="env_started_utc", base=started[0] or NOT_RECORDED,
                            new=started[1] or NOT_RECORDED, differs=False, measured=True))  # fmt: skip
    return pd.DataFrame(rows, columns=["label", "column", "base", "new", "differs", "measured"])


def _text_range(df: pd.DataFrame) -> str:
    if "env_started_utc" not in df or df["env_started_utc"].isna().all():
        return ""
    s = df["env_started_utc"].dropna().astype(str)
    return f"{s.min()} – {s.max()}"


# -- the gate -----------------------------------------------------------------------------------

_GATE = re.compile(r"^\s*(?:(?P<metric>[A-Za-z_]+)\s*=\s*)?(?P<value>[0-9]*\.?[0-9]+)\s*(?P<pct>%?)\s*$")


def parse_gate(specs: list[str]) -> dict[str, float]:
    """`5%` (every metric in GATED_BY_DEFAULT) or `METRIC=5%`; a fraction (0.05) works too.
    A later spec for the same metric wins."""
    gates: dict[str, float] = {}
    for spec in specs or []:
        m = _GATE.match(spec)
        if not m:
            raise ValueError(f"--fail-on-slowdown {spec!r}: write a threshold like 5% or 0.05, optionally METRIC=5%")
        value = float(m["value"]) / (100 if m["pct"] else 1)
        if not m["pct"] and value >= 1:
            raise ValueError(f"--fail-on-slowdown {spec!r}: a fraction must be below 1 (did you mean {m['value']}%?)")
        if m["metric"] and m["metric"] not in BY_NAME:
            raise ValueError(f"--fail-on-slowdown {spec!r}: unknown metric {m['metric']!r}; one of {', '.join(BY_NAME)}")
        for name in [m["metric"]] if m["metric"] else GATED_BY_DEFAULT:
            gates[name] = value
    return gates


# -- text ---------------------------------------------------------------------------------------

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def plain(value, limit: int = 80) -> str:
    """A string from the data for the terminal: control characters (escape sequences) and
    bidirectional overrides dropped, newlines as spaces, at most `limit` characters."""
    s = _CONTROL.sub("", str(value).replace("\n", " ").replace("\t", " "))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)) or x is pd.NA:
        return "–"
    x = float(x)
    return f"{x:.0f}" if 100 <= abs(x) < 1e7 else f"{x:.{digits}g}"


def ratio_text(r) -> str:
    if pd.isna(r.get("ratio")):
        return "–"
    if pd.isna(r.get("ratio_ci_low")):
        return f"{r['ratio']:.3f}"
    return f"{r['ratio']:.3f} [{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}]"


def cell_label(r, cols: list[str]) -> str:
    return A.label(r, cols) if cols else "all runs"


def noise_text(job_noise: float) -> str:
    """How the intervals treat the two jobs, in words."""
    if not job_noise:
        return "from the repeats alone: both sides measured in one job"
    return f"from the repeats and a between-job noise of {100 * job_noise:.3g} % per side"


def summary_text(cmp: Comparison, out: pathlib.Path | None = None, max_rows: int = 40) -> str:
    """The terminal summary: provenance differences, the verdict counts, then the headline metric
    per cell (throughput, else the first metric compared), the one-sided cells and the gate."""
    lines = [f"ddpbench compare: BASE = {plain(getattr(cmp, 'base_path', cmp.base_name), 200)}",
             f"                  NEW  = {plain(getattr(cmp, 'new_path', cmp.new_name), 200)}", ""]  # fmt: skip
    diff = cmp.provenance[cmp.provenance["differs"]]
    if diff.empty:
        lines.append("Provenance: no recorded difference in environment or code.")
    else:
        lines.append("Provenance differs:")
        for _, r in diff.iterrows():
            lines.append(f"  {plain(r['label'], 40)}: {plain(r['base'], 60)} -> {plain(r['new'], 60)}")
    for _, r in cmp.provenance[cmp.provenance["measured"]].iterrows():
        lines.append(f"  ({plain(r['label'], 50)}: {plain(r['base'], 50)} | {plain(r['new'], 50)})")
    lines += [f"WARNING: {plain(w, 400)}" for w in cmp.warnings]
    lines.append("")
    counts = cmp.counts()
    lines.append(f"Verdicts per metric (NEW vs BASE; 95 % interval of the ratio decides, {noise_text(cmp.job_noise)}):")
    for _, c in counts.iterrows():
        extra = f", {c['not_compared']} not compared" if c["not_compared"] else ""
        lines.append(f"  {c['label']:<38} {c['faster']} faster, {c['slower']} slower, {c['undecided']} no detectable "
                     f"difference{extra}")  # fmt: skip
    m = cmp.matched
    head = next((x.name for x in METRICS if (m["metric"] == x.name).any()), None)
    if head:
        lines += ["", f"{BY_NAME[head].label}, NEW/BASE with 95 % interval:"]
        rows = m[m["metric"] == head]
        labels = [plain(cell_label(r, cmp.label_axes), 60) for _, r in rows.iterrows()]
        width = max(len(s) for s in [*labels, "cell"])
        lines.append(f"  {'cell':<{width}}  {'BASE':>9}  {'NEW':>9}  {'ratio [95% interval]':<26} verdict")
        shown = list(zip(labels, (r for _, r in rows.iterrows())))
        for lab, r in shown[:max_rows]:
            lines.append(f"  {lab:<{width}}  {fmt(r['base']):>9}  {fmt(r['new']):>9}  {ratio_text(r):<26} {r['verdict']}"
                         + ("  UNSTABLE" if r["unstable"] else ""))  # fmt: skip
        if len(shown) > max_rows:
            lines.append(f"  ... {len(shown) - max_rows} more cells in comparison.csv")
    one = cmp.unmatched
    if len(one):
        lines += ["", f"Cells not compared ({len(one)}; {len(cmp.one_sided)} of them on one side only):"]
        for _, r in one.iterrows():
            lines.append(f"  {plain(cell_label(r, cmp.label_axes), 80)}: {plain(r['verdict'], 80)} ({plain(r['metric_label'], 80)})")
    if cmp.gates:
        lines.append("")
        gated = ", ".join(f"{k} {100 * v:g}%" for k, v in cmp.gates.items())
        failed = cmp.failed_gate
        if failed.empty:
            lines.append(f"Gate passed: no cell slower beyond its threshold with the whole interval ({gated}).")
        else:
            lines.append(f"GATE FAILED: {len(failed)} cell/metric(s) slower than allowed ({gated}), interval wholly beyond:")
            for _, r in failed.iterrows():
                lines.append(f"  {plain(cell_label(r, cmp.label_axes), 80)} -- {r['metric']}: {100 * r['slowdown']:+.1f}% "
                             f"slower (ratio {ratio_text(r)})")  # fmt: skip
            if cmp.warnings:
                lines.append("  (see the WARNING above: runs were measured on a busy machine, so the change may not be the only cause)")
    if out is not None:
        lines += ["", f"Written: {out / 'comparison.csv'}, {out / 'comparison.html'}"]
    return "\n".join(lines)


# -- the page -----------------------------------------------------------------------------------

FOREST_MAX_CELLS = 60  # rows of a forest plot; beyond that the cells with the largest changes


def forest_svg(cmp: Comparison) -> str | None:
    """A forest plot: one panel per metric, one row per matched cell, the ratio NEW/BASE with its
    interval on a log axis, coloured by strategy (plots.strategy_style); SVG text."""
    from ddpbench.report import figures as plots
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    m = cmp.matched[cmp.matched["ratio"].notna()]
    metrics = [x for x in METRICS if (m["metric"] == x.name).any()]
    if not metrics:
        return None
    keys = list(dict.fromkeys(tuple(map(str, r)) for r in m[cmp.axes].itertuples(index=False)))
    if len(keys) > FOREST_MAX_CELLS:
        size = m.assign(_k=[tuple(map(str, r)) for r in m[cmp.axes].itertuples(index=False)],
                        _d=np.abs(np.log(m["ratio"].astype(float))))  # fmt: skip
        keep = size.groupby("_k")["_d"].max().sort_values(ascending=False).index[:FOREST_MAX_CELLS]
        keys = [k for k in keys if k in set(keep)]
    ypos = {k: i for i, k in enumerate(keys)}
    labels = []
    for k in keys:
        row = dict(zip(cmp.axes, k))
        labels.append(plots.text(cell_label(row, cmp.label_axes), 60))
    with plt.rc_context(plots.RC):
        fig, axs = plt.subplots(1, len(metrics), sharey=True, squeeze=False, layout="constrained",
                                figsize=(1.2 + 2.3 * len(metrics) + 0.05 * max(map(len, labels)), 1.3 + 0.24 * len(keys)))  # fmt: skip
        seen = {}
        for ax, metric in zip(axs[0], metrics):
            d = m[m["metric"] == metric.name]
            for _, r in d.iterrows():
                k = tuple(str(r[c]) for c in cmp.axes)
                if k not in ypos:
                    continue
                strategy = r["strategy"] if "strategy" in r else ""
                style = plots.strategy_style(strategy)
                lo, hi = r["ratio_ci_low"], r["ratio_ci_high"]
                err = None if pd.isna(lo) else [[r["ratio"] - lo], [hi - r["ratio"]]]
                hollow = r["verdict"] not in (FASTER, SLOWER)
                ax.errorbar([r["ratio"]], [ypos[k]], xerr=err, fmt=style["marker"], color=style["color"],
                            mfc="white" if hollow else style["color"], ms=5, capsize=2, lw=1.2)  # fmt: skip
                seen.setdefault(str(strategy), style)
            ax.axvline(1.0, color="#444", lw=0.8)
            threshold = cmp.gates.get(metric.name)
            if threshold:
                bound = 1 / (1 + threshold) if metric.higher_is_better else 1 + threshold
                ax.axvline(bound, color="#c33", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
            better = "right" if metric.higher_is_better else "left"
            ax.set_title(plots.text(metric.label))
            ax.set_xlabel(f"NEW / BASE ({better} = faster)")
        axs[0][0].set_yticks(range(len(keys)), labels)
        axs[0][0].invert_yaxis()
        handles = [plt.Line2D([], [], marker=s["marker"], color=s["color"], ls="", label=plots.text(f"strategy={name}"))
                   for name, s in seen.items()]  # fmt: skip
        if handles:
            fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)))
        fig.suptitle("Ratio NEW / BASE per cell with 95 % interval (filled: the interval excludes 1)")
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata=plots.METADATA["svg"], bbox_inches="tight")
        plt.close(fig)
    svg = buf.getvalue()
    return _inline(svg, "forest")


_SVG_HEAD = re.compile(r"^.*?(?=<svg)", re.S)


def _inline(svg: str, prefix: str) -> str:
    """An SVG document as an inline element with prefixed ids (the same rewrite as report.inline_svg,
    which reads a file; this one takes the text, so nothing is written before the page)."""
    text = _SVG_HEAD.sub("", svg)
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)  # RDF names and matplotlib's URL: not needed
    text = re.sub(r'id="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)


def _templates() -> pathlib.Path:
    here = REPO_ROOT / "report" / "templates"
    return here if here.is_dir() else pathlib.Path.cwd() / "report" / "templates"


def render_html(cmp: Comparison, title: str = "ddpbench comparison") -> str:
    import jinja2
    from markupsafe import Markup

    try:
        from ddpbench.report.build import html_text
    except ImportError:  # pragma: no cover - the same two lines, should report.py move it
        def html_text(value):
            return value if isinstance(value, Markup) or not isinstance(value, str) else _CONTROL.sub("", value)

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_templates())), autoescape=True,
                             undefined=jinja2.StrictUndefined, finalize=html_text)  # fmt: skip
    m = cmp.matched
    rows, classes = [], []
    for _, r in m.iterrows():
        rows.append([cell_label(r, cmp.label_axes), r["metric_label"], str(int(r["n_base"])) if pd.notna(r["n_base"]) else "–",
                     str(int(r["n_new"])) if pd.notna(r["n_new"]) else "–", fmt(r["base"]), fmt(r["new"]), ratio_text(r),
                     "–" if pd.isna(r["slowdown"]) else f"{100 * r['slowdown']:+.1f}%", r["verdict"],
                     ("GATE FAILED" if r["gate_failed"] else "") + (f" UNSTABLE: {r['unstable_cause']}" if r["unstable"] else "")])  # fmt: skip
        classes.append("slower" if r["verdict"] == SLOWER else "faster" if r["verdict"] == FASTER else "")
    one = [[cell_label(r, cmp.label_axes), r["verdict"], r["metric_label"]] for _, r in cmp.unmatched.iterrows()]
    svg = forest_svg(cmp)
    prov = cmp.provenance
    ctx = dict(
        title=title,
        base=getattr(cmp, "base_path", cmp.base_name),
        new=getattr(cmp, "new_path", cmp.new_name),
        differs=[r for _, r in prov[prov["differs"]].iterrows()],
        warnings=cmp.warnings,
        same=[r for _, r in prov[~prov["differs"] & ~prov["measured"]].iterrows()],
        measured=[r for _, r in prov[prov["measured"]].iterrows()],
        counts=[r for _, r in cmp.counts().iterrows()],
        columns=["cell", "metric", "n BASE", "n NEW", "BASE", "NEW", "NEW/BASE [95% interval]", "slowdown", "verdict", "flags"],
        rows=rows, row_class=classes, one_sided=one,
        gates=[(k, f"{100 * v:g}%") for k, v in cmp.gates.items()],
        failed=[(cell_label(r, cmp.label_axes), r["metric_label"], f"{100 * r['slowdown']:+.1f}%", ratio_text(r))
                for _, r in cmp.failed_gate.iterrows()],  # fmt: skip
        forest=Markup(svg) if svg else None,
        forest_max=FOREST_MAX_CELLS,
        n_cells=len(m.drop_duplicates(cmp.axes)) if len(m) else 0,
        axes=cmp.label_axes,
        job_noise=cmp.job_noise,
        job_noise_pct=f"{100 * cmp.job_noise:.3g} %",
    )
    return env.get_template("compare.html.j2").render(**ctx)


def write(cmp: Comparison, out, title: str = "ddpbench comparison") -> tuple[pathlib.Path, pathlib.Path]:
    """comparison.csv and comparison.html into `out`, each written atomically; the page is rendered
    before anything is written, so a failure leaves the folder as it was."""
    html = render_html(cmp, title)
    folder = safe_io.real_dir(out)
    csv = folder / "comparison.csv"
    with safe_io.atomic_write(csv, newline="") as handle:
        cmp.table.to_csv(handle, index=False)
    page = folder / "comparison.html"
    safe_io.atomic_write_text(page, html)
    return csv, page


# -- command line -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="ddpbench compare",
        description="Compare two result sets (folders with aggregate/runs.csv, or runs.csv files): what differs in "
                    "their environments, and per matched cell whether NEW is faster, slower or not detectably "
                    "different from BASE (95 %% Welch interval of the ratio NEW/BASE). Exit 0; 1 when the "
                    "--fail-on-slowdown gate fails; 2 on bad input.",
        epilog="Metrics: " + ", ".join(f"{m.name} ({m.label})" for m in METRICS) + ". Details: docs/compare.md.",
    )  # fmt: skip
    ap.add_argument("base", metavar="BASE", help="the reference result set (folder or runs.csv)")
    ap.add_argument("new", metavar="NEW", help="the result set to judge against it")
    ap.add_argument("--out", default="comparison", type=pathlib.Path,
                    help="folder for comparison.csv and comparison.html (default: %(default)s)")
    ap.add_argument("--fail-on-slowdown", action="append", default=[], metavar="[METRIC=]PCT",
                    help="exit 1 when a matched cell is slower than BASE by more than PCT with the whole 95 %% "
                         "interval beyond it; bare PCT gates " + ", ".join(GATED_BY_DEFAULT)
                         + "; repeatable (e.g. 5%%, samples_per_s=3%%)")  # fmt: skip
    ap.add_argument("--max-rel-ci", type=float, default=A.MAX_REL_CI,
                    help="stability threshold for the UNSTABLE flag (default %(default)s)")
    ap.add_argument("--baseline-strategy", default=A.BASELINE_STRATEGY,
                    help="strategy whose p = 1 runs are each side's speedup baseline (default %(default)s)")
    ap.add_argument("--ignore", action="append", default=[], metavar="AXIS",
                    help="match cells without this axis: the change being judged (e.g. --ignore bucket_mb to compare "
                         "two bucket sizes); its values are listed first in the provenance; repeatable")
    ap.add_argument("--job-noise", type=float, default=JOB_NOISE, metavar="FRACTION",
                    help="between-job standard deviation of a cell's (log) value, added to every interval: two jobs "
                         "on one machine differ by more than their repeats show (default %(default)s, measured on a "
                         "2-core VM; 0: repeats only, for sides measured in one job). See docs/compare.md")
    ap.add_argument("--title", default="ddpbench comparison")
    ap.add_argument("--no-files", action="store_true", help="print the summary only; write nothing")
    args = ap.parse_args(argv)
    try:
        gates = parse_gate(args.fail_on_slowdown)
        if not (0 <= args.job_noise < 1):
            raise ValueError(f"--job-noise must be a fraction in [0, 1) (0.03 = 3 %), not {args.job_noise!r}")
    except ValueError as err:
        print(f"ddpbench compare: error: {err}", file=sys.stderr)
        return EXIT_INPUT
    try:
        cmp = compare_paths(args.base, args.new, gates, max_rel_ci=args.max_rel_ci,
                            baseline_strategy=args.baseline_strategy, ignore=args.ignore,
                            job_noise=args.job_noise)  # fmt: skip
    except InputError as err:
        print(f"ddpbench compare: error: {plain(err, 500)}", file=sys.stderr)
        return EXIT_INPUT
    out = None
    if not args.no_files:
        try:
            write(cmp, args.out, args.title)
        except (OSError, safe_io.UnsafePathError) as err:
            print(f"ddpbench compare: error: cannot write {args.out}: {err}", file=sys.stderr)
            return EXIT_INPUT
        out = args.out
    print(summary_text(cmp, out))
    return EXIT_GATE if len(cmp.failed_gate) else 0


if __name__ == "__main__":
    sys.exit(main())
