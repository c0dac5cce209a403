"""Compare two result sets: did a change make training faster or slower, and can we tell?

BASE and NEW are result folders (holding aggregate/runs.csv) or runs.csv files. Per cell present
on both sides (matched on the grid keys of `analysis.tables.axes`: every cell parameter but seed,
plus world size and nodes) and per metric (throughput, step time, exposed communication per step,
epoch time, speedup): the ratio NEW/BASE of the geometric means over repeats with a 95 % Welch
t-interval on the difference of the mean logs -- the interval analysis uses for strategy-vs-
strategy ratios -- and a verdict decided by the interval alone: faster, slower, or no detectable
difference (the per-cell statistics: `analysis.compare_cells`). Cells on one side only are
listed; what differs in the two sides' recorded environments comes with it
(`analysis.provenance`). Bad input (a missing or corrupt table, no runs, no common cells,
different columns) raises InputError naming the path and the problem. The gate
(`--fail-on-slowdown 5%`, `METRIC=5%`) fails a matched cell slower by more than the threshold with
the whole interval beyond it, passes one whose interval's slow end lies within the threshold, and
cannot judge the rest (no interval, unstable, or an interval reaching past the threshold: column
`gate_cannot_judge` says why). docs/compare.md explains the statistics and the gate.

`compare_frames(base_runs, new_runs)` or `compare_paths(BASE, NEW)` return a `Comparison` with
`.table` (comparison.csv) and `.provenance` (the environment diff), without writing anything;
`report.compare_page` writes the files and is the command line (`ddpbench compare`).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddpbench.analysis.comparison import Verdict
from ddpbench.analysis.compare_cells import (
    BY_NAME,
    COMPARE_METRICS,
    ESTIMATE,
    JOB_NOISE,
    JOB_NOISE_CAP,
    Side,
    cell_rows,
    estimate_job_noise,
    finish_intervals,
    gate_failed,
    gate_unjudged,
)
from ddpbench.analysis.health import MAX_REL_CI, busy_runs, oversubscribed_runs, timed_runs
from ddpbench.analysis.provenance import provenance_diff
from ddpbench.analysis.tables import BASELINE_STRATEGY, TIME, axes, label, load_runs_frame, varying
from ddpbench.core.run_record import Env

# What a bare `--fail-on-slowdown 5%` gates: the metrics that say how long training takes.
GATED_BY_DEFAULT = ("samples_per_s", "step_time_median_s", "epoch_time_s")

TABLE_COLUMNS = [
    "metric", "metric_label", "n_base", "n_new", "base", "new", "ratio", "ratio_ci_low", "ratio_ci_high",
    "ratio_ci_level", "slowdown", "verdict", "gate_threshold", "gate_failed", "gate_cannot_judge", "unstable",
    "unstable_cause",
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
    if "world_size" not in raw or not axes(raw):
        raise InputError(csv, "not a runs table: no grid columns (strategy, world_size, ...)")
    if not any(m.column in raw or (m.column == TIME and "samples_per_s" in raw) for m in COMPARE_METRICS):
        raise InputError(csv, "no timing column (samples_per_s, step_time_median_s, epoch_time_s)")
    for col in {m.column for m in COMPARE_METRICS} | {"timed_steps"}:
        if col in raw and raw[col].notna().any() and pd.to_numeric(raw[col], errors="coerce").isna().gt(raw[col].isna()).any():
            raise InputError(csv, f"column {col} holds values that are not numbers (a corrupt table?)")
    runs = load_runs_frame(raw)
    if timed_runs(runs[runs["status"] == "ok"]).empty:
        statuses = ", ".join(f"{n} {s}" for s, n in runs["status"].value_counts().items())
        raise InputError(csv, f"no ok run with timed steps ({len(runs)} rows: {statuses})")
    return runs, csv


def _line(err: Exception) -> str:
    return str(err).strip().splitlines()[0][:200] if str(err).strip() else "unreadable"


def check_schemas(base: pd.DataFrame, new: pd.DataFrame, base_path, new_path) -> None:
    """Both sides must identify cells by the same columns and carry the same metric columns."""
    for cols, what in ((axes, "grid column"), (_metric_columns, "metric column")):
        a, b = set(cols(base)), set(cols(new))
        if a - b:
            raise InputError(new_path, f"lacks the {what}(s) {', '.join(sorted(a - b))} that {base_path} has: "
                                       "the result sets have different schemas")  # fmt: skip
        if b - a:
            raise InputError(base_path, f"lacks the {what}(s) {', '.join(sorted(b - a))} that {new_path} has: "
                                        "the result sets have different schemas")  # fmt: skip


def _metric_columns(runs: pd.DataFrame) -> list[str]:
    return [c for c in dict.fromkeys(m.column for m in COMPARE_METRICS) if c in runs]


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
    job_noise_cells: int = 0  # > 0: job_noise was estimated from that many cells measured in several jobs
    job_noise_beyond_cap: float | None = None  # the estimate, when above JOB_NOISE_CAP (job_noise is the cap)

    @property
    def cannot_judge(self) -> bool:
        """The sides disagree between jobs beyond what the gate can judge (JOB_NOISE_CAP)."""
        return self.job_noise_beyond_cap is not None

    @property
    def unjudged(self) -> pd.DataFrame:
        """Gated rows that did not fail the gate and that it cannot pass either (gate_cannot_judge: why)."""
        return self.table[self.table["gate_cannot_judge"] != ""]

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
        for metric in COMPARE_METRICS:
            v = m.loc[m["metric"] == metric.name, "verdict"]
            if v.empty:
                continue
            n = {k: int((v == k).sum()) for k in (Verdict.FASTER, Verdict.SLOWER, Verdict.NO_DIFFERENCE)}
            rows.append(dict(metric=metric.name, label=metric.label, faster=n[Verdict.FASTER], slower=n[Verdict.SLOWER],
                             undecided=n[Verdict.NO_DIFFERENCE], not_compared=len(v) - sum(n.values())))  # fmt: skip
        return pd.DataFrame(rows, columns=["metric", "label", "faster", "slower", "undecided", "not_compared"])


def compare_frames(base: pd.DataFrame, new: pd.DataFrame, gates: dict[str, float] | None = None,
                   base_name: str = "BASE", new_name: str = "NEW", max_rel_ci: float = MAX_REL_CI,
                   baseline_strategy: str = BASELINE_STRATEGY, ignore: Iterable[str] = (),
                   job_noise: float | str = JOB_NOISE) -> Comparison:  # fmt: skip
    """The comparison of two runs tables (as analysis.load_runs_frame returns them): every cell on
    both sides × every metric both sides measured, plus one row per cell not compared (on one side
    only, or without an ok run). `gates` maps metric -> threshold (0.05 = 5 %). `ignore`: axes left
    out of the matching (the change being judged, e.g. bucket_mb); their values head the provenance.
    `job_noise`: the between-job standard deviation of a log value added to every interval (JOB_NOISE;
    0 when both sides come from one job, e.g. an interleaved variant axis; "estimate": from the cells
    either side measured in several jobs, estimate_job_noise)."""
    gates = dict(gates or {})
    ignore = check_ignored(base, new, ignore)
    cols = [c for c in axes(base) if c not in ignore]
    estimated_from, beyond_cap = 0, None
    if job_noise == ESTIMATE:
        job_noise, estimated_from = estimate_job_noise([base, new], cols)
        if not estimated_from:
            raise InputError("--job-noise estimate", "no cell of either side was measured in two or more jobs (runs.csv "
                             "env_job_id) with 2+ ok runs in each: give the noise as a number (default 0.03)")  # fmt: skip
        if not job_noise <= JOB_NOISE_CAP:  # bounded, whatever the data: the intervals use the cap
            job_noise, beyond_cap = JOB_NOISE_CAP, job_noise
    if not (isinstance(job_noise, (int, float)) and 0 <= job_noise < 1):
        raise ValueError(f"job_noise must be in [0, 1) or {ESTIMATE!r}, not {job_noise!r}")
    both = pd.concat([base[cols], new[cols]], ignore_index=True)
    label_axes = varying(both, cols)
    b, n = Side(base, cols, baseline_strategy), Side(new, cols, baseline_strategy)
    metrics = [m for m in COMPARE_METRICS if m.column in base and m.column in new]
    rows = cell_rows(b, n, cols, {"base": base_name, "new": new_name}, metrics, max_rel_ci)
    finish_intervals(rows, job_noise=job_noise)
    for row in rows:
        if row["metric"]:
            threshold = gates.get(row["metric"])
            row["gate_threshold"] = threshold if threshold is not None else np.nan
            row["gate_failed"] = threshold is not None and gate_failed(row, threshold)
            row["gate_cannot_judge"] = gate_unjudged(row, threshold, job_noise) if threshold is not None else ""
    table = pd.DataFrame(rows, columns=[*cols, "present", *TABLE_COLUMNS])
    table["metric"] = table["metric"].fillna("")
    for col, empty in (("gate_failed", False), ("gate_cannot_judge", ""), ("unstable", False), ("unstable_cause", "")):
        table[col] = table[col].astype(object).where(table[col].notna(), empty)
    table[["gate_failed", "unstable"]] = table[["gate_failed", "unstable"]].astype(bool)
    return Comparison(base_name, new_name, cols, label_axes, table, provenance_diff(base, new, ignore), gates,
                      load_warnings({base_name: b.runs[b.used_mask], new_name: n.runs[n.used_mask]}), job_noise,
                      estimated_from, beyond_cap)  # fmt: skip


def check_ignored(base: pd.DataFrame, new: pd.DataFrame, ignore: Iterable[str]) -> list[str]:
    """The axes to leave out of the matching; InputError naming one that is no axis of either side."""
    ignore = list(dict.fromkeys(ignore))
    known = set(axes(base)) | set(axes(new))
    for axis in ignore:
        if axis not in known:
            raise InputError(f"--ignore {axis}", f"not an axis of either result set (axes: {', '.join(sorted(known))})")
    return ignore


def load_warnings(used: dict[str, pd.DataFrame]) -> list[str]:
    """Runs measured on a busy machine (analysis.busy_runs: other processes took more than 10 % of
    the CPU while timed) or oversubscribed, per side: a difference between the sides may be the load."""
    parts = []
    for name, runs in used.items():
        busy, over = int(busy_runs(runs).sum()), int(oversubscribed_runs(runs).sum())
        if busy:
            frac = pd.to_numeric(runs.get(Env.other_cpu_frac), errors="coerce").max()
            parts.append(f"{name}: {busy} of {len(runs)} runs on a busy machine (other processes took up to "
                         f"{100 * frac:.0f} % of the CPU while timed)")  # fmt: skip
        if over:
            parts.append(f"{name}: {over} of {len(runs)} runs oversubscribed")
    if not parts:
        return []
    return ["; ".join(parts) + ": a difference between the sides may come from the load, not from the change"]


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


def cell_label(r, cols: list[str]) -> str:
    return label(r, cols) if cols else "all runs"


def noise_text(job_noise: float, estimated_from: int = 0, beyond_cap: float | None = None) -> str:
    """How the intervals treat the two jobs, in words."""
    if beyond_cap is not None:
        return (f"from the repeats and a between-job noise of {100 * job_noise:.3g} % per side, the cap: the noise "
                f"estimated from {estimated_from} cell(s) measured in several jobs is {100 * beyond_cap:.3g} %, too "
                "much for any verdict or gate to be trusted")  # fmt: skip
    if estimated_from:
        return (f"from the repeats and a between-job noise of {100 * job_noise:.3g} % per side, estimated from "
                f"{estimated_from} cell(s) measured in several jobs")  # fmt: skip
    if not job_noise:
        return "from the repeats alone: both sides measured in one job"
    return f"from the repeats and a between-job noise of {100 * job_noise:.3g} % per side"

