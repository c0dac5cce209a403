"""The report: statistics tables, fits, figures, and one HTML and one LaTeX/PDF document.

    python -m ddpbench.report --runs runs.csv [--steps steps.csv] [--comm comm.csv] [--max-rel-ci 0.05] --out DIR

writes DIR/cells.csv, speedup.csv, fits.csv, comparisons.csv, links.csv (header only without two-node
cells over a link), figures/, report.html (self-contained: SVGs inline, no network), report.tex and,
where latexmk is installed, report.pdf. Prints the
path of report.html last. Works without Snakemake; the workflow's report rule calls it.

The out folder and the tables are untrusted (issue 22: people exchange result folders):
every output is replaced atomically (safe_io: a symlink planted at an output's name is
replaced, its target untouched; a symlinked figures/ is refused), latexmk runs -norc and
-no-shell-escape in a fresh private folder (a latexmkrc in the out folder is never read),
and every string from the data is escaped for HTML, LaTeX and matplotlib.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from dataclasses import dataclass, field
from typing import Iterable

import jinja2
from markupsafe import Markup
import numpy as np
import pandas as pd
import yaml

from ddpbench import REPO_ROOT
from ddpbench import analysis as A
from ddpbench.results import aggregate
from ddpbench.report import figures as plots, studies
from ddpbench.core import safe_io, storage
from ddpbench.report.findings import Finding, bandwidth_text, findings, num, with_ci


def _report_dir() -> pathlib.Path:
    """report/ of the checkout: next to src/ (editable install) or in the working directory
    (the workflow runs from the repository root, also with a non-editable install)."""
    here = REPO_ROOT / "report"
    return here if (here / "templates").is_dir() else pathlib.Path.cwd() / "report"


TEMPLATES = _report_dir() / "templates"
CAPTIONS = _report_dir() / "captions"
STATUS_ORDER = ("failed", "timeout", "skipped", "superseded")

# Metrics shown in the cells table (the CSV has all of them).
# Rows of a table shown at once in the HTML report (a pager and the filter box reach the rest).
PAGE_SIZE = 50

CELL_TABLE = ["step_time_median_s", "samples_per_s", "epoch_time_s", "frac_comm", "peak_rss_mb"]


# -- formatting ------------------------------------------------------------------------------


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    row_class: list[str] = field(default_factory=list)  # per row: "" or a CSS class (e.g. "unstable")


def pct(level) -> str:
    """0.95 -> '95%', 0.9375 -> '93.75%'; no level -> en dash."""
    return "–" if pd.isna(level) else f"{100 * float(level):.4g}%"


# Counts of cells.csv that qualify a cell's numbers: column -> the flag (k: the count, n: repeats).
CELL_FLAGS = [
    ("n_busy", "busy machine: {k}/{n} runs"),
    ("n_oversubscribed", "oversubscribed: {k}/{n} runs"),
    ("n_untimed", "{k} ok run(s) without timed steps left out"),
    ("n_superseded", "{k} run(s) of other code set aside"),
    ("n_off_lock", "off-lock packages: {k}/{n} runs"),
    ("n_nondeterministic", "same-seed repeats disagree: {k} runs"),
    ("n_diverged", "loss diverged or spiked: {k}/{n} runs (lower lr: a run that does not learn answers nothing)"),
]


def cell_flags(r) -> str:
    """What makes a cell's numbers less trustworthy, stated next to them."""
    flags = []
    if bool(r.get("unstable", False)):
        flags.append(f"UNSTABLE: {r['unstable_cause']}")
    n = int(r.get("n_repeats", 0))
    for column, text in CELL_FLAGS:
        if r.get(column, 0):
            flags.append(text.format(k=int(r[column]), n=n))
    return "; ".join(flags)


def _median_level(cells: pd.DataFrame, metrics: list[str]) -> pd.Series:
    """Per row, the level of the order-statistic intervals shown (the same for every median metric of a row)."""
    cols = [f"{m}_ci_level" for m in metrics if m not in A.TIMING_METRICS and f"{m}_ci_level" in cells]
    return cells[cols].max(axis=1) if cols else pd.Series(np.nan, index=cells.index)


def cells_table(cells: pd.DataFrame, shown: list[str]) -> Table:
    metrics = [m for m in CELL_TABLE if m in cells]
    medians = [m for m in metrics if m not in A.TIMING_METRICS]
    levels = _median_level(cells, metrics)
    rows, classes = [], []
    for i, r in cells.iterrows():
        if r["n_repeats"] == 0:
            continue
        rows.append([str(r[c]) for c in shown] + [num(r["n_repeats"])] + [
            with_ci(r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"]) for m in metrics
        ] + ([pct(levels[i])] if medians else []) + [cell_flags(r)])  # fmt: skip
        classes.append("unstable" if bool(r.get("unstable", False)) else "")
    timing = ", ".join(A.METRICS[m] for m in metrics if m in A.TIMING_METRICS)
    note = (f"{timing}: geometric mean over repeats [95% Student-t interval on the log values]; "
            f"{', '.join(A.METRICS[m] for m in medians)}: median [order-statistic interval at the level in the "
            "column 'median interval level']; one repeat: no interval. UNSTABLE: the throughput interval's "
            "half-width exceeds the stability threshold (see Methodology).")  # fmt: skip
    return Table(shown + ["repeats"] + [A.METRICS[m] for m in metrics] + (["median interval level"] if medians else [])
                 + ["flags"], rows, note, classes)  # fmt: skip


def speedup_table(speed: pd.DataFrame, shown: list[str]) -> Table:
    if speed.empty:
        return Table([], [], "no speedup: no successful run has a baseline")
    rows = [
        [str(r[c]) for c in shown]
        + [r["measure"], r["baseline"], num(r["n_repeats"]), num(r["time_s"]),
           with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
           with_ci(r["efficiency"], r["efficiency_ci_low"], r["efficiency_ci_high"]),
           speedup_flags(r)]  # fmt: skip
        for _, r in speed.iterrows()
    ]
    classes = ["unstable" if bool(r.get("unstable", False)) else "" for _, r in speed.iterrows()]
    return Table(shown + ["measure", "baseline", "repeats", "epoch time [s]", "S(p)", "E(p)", "flags"], rows,
                 "S = geometric-mean baseline epoch time / geometric-mean epoch time [95% Welch t-interval on the "
                 "log ratio]; E = S/p with S's interval over p; UNSTABLE: the cell or its baseline is", classes)  # fmt: skip


def speedup_flags(r) -> str:
    flags = [f"UNSTABLE: {r['unstable_cause']}"] if bool(r.get("unstable", False)) else []
    if bool(r.get("versions_differ", False)):
        flags.append("cell and baseline measured with different code or packages")
    return "; ".join(flags)


def verdict_text(r) -> str:
    return {"A faster": f"{r['strategy_a']} faster", "B faster": f"{r['strategy_b']} faster"}.get(r["verdict"], r["verdict"])


def comparisons_table(cmp: pd.DataFrame, shown: list[str]) -> Table:
    """Strategy against strategy at equal settings: detected differences first, largest first."""
    if cmp.empty:
        return Table([], [], "no comparison: no setting was measured with two strategies")
    setting = [c for c in shown if c != "strategy" and c in cmp] or ["world_size"]
    order = cmp.assign(_diff=cmp["verdict"].isin(["A faster", "B faster"]), _size=np.abs(np.log(cmp["ratio"])))
    order = order.sort_values(["_diff", "_size"], ascending=[False, False], kind="stable")
    rows = [[str(r[c]) for c in setting]
            + [f"{r['strategy_a']} / {r['strategy_b']}", with_ci(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"]),
               verdict_text(r), f"{int(r['n_a'])} / {int(r['n_b'])}",
               f"UNSTABLE: {r['unstable_cause']}" if bool(r["unstable"]) else ""]
            for _, r in order.iterrows()]  # fmt: skip
    n_diff = int(order["_diff"].sum())
    return Table(setting + ["A / B", "throughput ratio A/B", "verdict", "repeats", "flags"], rows,
                 f"{n_diff} of {len(order)} comparisons show a difference. Ratio of geometric-mean throughputs "
                 "[95% Welch t-interval on the log ratio]; a difference is called only when the interval excludes 1.",
                 ["unstable" if bool(r["unstable"]) else "" for _, r in order.iterrows()])  # fmt: skip


KIND_ORDER = {"fit": 0, "prediction": 1, "measured": 2}
LAW_TEXT = {"amdahl": "Amdahl", "gustafson": "Gustafson", "karp_flatt": "Karp–Flatt", "cost_model": "cost model",
            "comm_sweep": "collective sweep"}  # fmt: skip


def karp_flatt_note(e: float) -> str:
    """What a Karp–Flatt value says: e > 1 is not a serial fraction but a slowdown."""
    if pd.isna(e):
        return ""
    if e > 1:
        return "e > 1: the parallel run was slower than one process (S < 1); overhead, not a serial fraction"
    return "serial fraction implied by the measured speedup; rising with p means overhead grows with p"


def fits_table(fits: pd.DataFrame) -> Table:
    """Estimates first (fits, then predictions, then Karp–Flatt); laws that could not be fitted
    are summarised once per law and reason in the note, never a row per group."""
    if fits.empty:
        return Table([], [], "no fits: no scaling group")
    numeric = fits[fits["kind"].isin(KIND_ORDER)].copy()
    numeric["_order"] = numeric["kind"].map(KIND_ORDER)
    numeric = numeric.sort_values(["_order", "law", "group", "p"], kind="stable")
    rows = []
    for _, r in numeric.iterrows():
        kind = "PREDICTION (extrapolated)" if r["kind"] == "prediction" else r["kind"]
        note = karp_flatt_note(r["estimate"]) if r["law"] == "karp_flatt" else str(r["note"]) if pd.notna(r["note"]) else ""
        rows.append([LAW_TEXT.get(r["law"], r["law"]), r["parameter"], with_ci(r["estimate"], r["ci_low"], r["ci_high"]),
                     num(r["p"]), r["group"], kind, num(r["n_points"]), num(r["r2"]), note])  # fmt: skip
    return Table(["law", "parameter", "estimate [interval]", "p", "group", "kind", "points", "R²", "note"], rows,
                 " ".join([unfitted_summary(fits), "Karp–Flatt intervals follow from the speedup's 95% Welch "
                           "interval; fitted parameters and predictions carry nominal 95% intervals under each "
                           "model's assumptions, coverage not tested (see Methodology)."]).strip(),
                 ["prediction" if k == "prediction" else "" for k in numeric["kind"]])  # fmt: skip


LINK_METHOD = (
    "Each two-node cell on a link ran its nodes in two network namespaces of this machine joined by a veth link, "
    "unshaped or shaped by tc to a rate; a short TCP probe between the namespaces at the cell's start measured the "
    "bandwidth the link achieved, and the link figure, fits and findings use that measured bandwidth (the nominal rate "
    "is a label). Per link, the communication time per step of every strategy's runs there is fitted as "
    "t = α·calls + bytes/B (non-negative least squares on relative error): α the cost of a collective call, B the "
    "effective bandwidth. Per strategy, the time per sample (1/throughput) over the links is fitted as "
    "t(B) = a + b/B the same way; it equals the single process's time per sample at B* = b/(t_single − a), the "
    "bandwidth below which the strategy loses to one process: a point estimate without interval, marked "
    "extrapolated outside the measured bandwidths; a ≥ t_single means it loses at any bandwidth."
)


def _bandwidth_with_ci(r) -> str:
    est = bandwidth_text(r["achieved_gbps"])
    if pd.isna(r["achieved_gbps_ci_low"]) or pd.isna(r["achieved_gbps_ci_high"]):
        return est
    level = "" if abs(float(r["achieved_gbps_ci_level"]) - A.LEVEL) < 1e-3 else f" ({pct(r['achieved_gbps_ci_level'])})"
    return f"{est} [{bandwidth_text(r['achieved_gbps_ci_low'])}, {bandwidth_text(r['achieved_gbps_ci_high'])}]{level}"


def links_tables(links: pd.DataFrame) -> dict | None:
    """The Links section: one table per link (rate, measured bandwidth, latency-bandwidth fit) and one
    per strategy (time per sample against bandwidth, the crossing with one process); None without links."""
    if links.empty:
        return None
    gcols = [c for c in links.columns if c not in A.LINK_TABLE_COLUMNS]
    per_link = links[links["kind"] == "link"]
    rows = [[str(r[c]) for c in gcols]
            + [r["link"], "unshaped" if pd.isna(r["nominal_gbps"]) else bandwidth_text(r["nominal_gbps"]),
               _bandwidth_with_ci(r), num(r["n_runs"]), num(r["alpha_s"] * 1e6), bandwidth_text(r["bandwidth_gbps"]),
               num(r["r2"]), "" if pd.isna(r["note"]) else str(r["note"])]
            for _, r in per_link.iterrows()]  # fmt: skip
    link_table = Table(gcols + ["link", "nominal rate", "measured [interval]", "runs", "α [µs per call]",
                                "effective bandwidth", "R²", "note"], rows,
                       "measured: the TCP probe at each run's start, median over the link's runs [order-statistic "
                       "interval, level when not 95%]; α and the effective bandwidth B: t = α·calls + bytes/B "
                       "fitted to the communication per step of every strategy's runs on the link.")  # fmt: skip
    cross = links[links["kind"] == "crossing"]
    ms = lambda v: num(float(v) * 1e3)  # noqa: E731 — seconds per sample as ms
    rows, classes = [], []
    for _, r in cross.iterrows():
        extrapolated = A.truthy(r["extrapolated"])
        verdict = str(r["verdict"]) + (" (EXTRAPOLATED)" if extrapolated else "")
        rows.append([str(r[c]) for c in gcols]
                    + [str(r["strategy"]) + (f" ({r['setting']})" if isinstance(r["setting"], str) and r["setting"] else ""),
                       ms(r["a_s"]), ms(r["b_s_gbps"]), ms(r["single_s"]), verdict,
                       bandwidth_text(r["crossing_gbps"]),
                       f"{bandwidth_text(r['measured_min_gbps'])} – {bandwidth_text(r['measured_max_gbps'])}",
                       num(r["n_runs"]), num(r["r2"]), "" if pd.isna(r["note"]) else str(r["note"])])  # fmt: skip
        classes.append("prediction" if extrapolated else "")
    crossing_table = Table(gcols + ["strategy", "a [ms/sample]", "b [ms·Gbit/s per sample]", "one process [ms/sample]",
                                    "against one process", "loses below", "bandwidths measured", "runs", "R²", "note"],
                           rows, "time per sample t(B) = a + b/B fitted over the links (B: measured, Gbit/s); one "
                           "process: the baseline's time per sample at p = 1; loses below B* = b/(one process − a), "
                           "a point estimate; EXTRAPOLATED: B* outside the bandwidths measured.", classes)  # fmt: skip
    return dict(per_link=link_table, crossings=crossing_table)


def unfitted_summary(fits: pd.DataFrame) -> str:
    """One sentence per law and reason for the groups a law could not be fitted to."""
    missing = fits[~fits["kind"].isin(KIND_ORDER)]
    parts = []
    for (law, note), g in missing.groupby(["law", "note"], sort=True, dropna=False):
        n = g["group"].nunique()
        parts.append(f"{LAW_TEXT.get(law, law)} not fitted in {n} group{'s' if n != 1 else ''}: {note}.")
    return " ".join(parts)


def problems_table(runs: pd.DataFrame, shown: list[str]) -> Table:
    """Runs that are not ok: a failure's kind (signal, oom, exception, hang, timeout) and its
    one-line diagnosis (ddpbench.run.diagnose) where the launcher made one, else the reason."""
    bad = runs[runs["status"] != "ok"]
    cols = [c for c in [*shown, "repeat"] if c in bad]
    rows = []
    for _, r in bad.iterrows():
        diagnosed = r.get("failure_reason")
        kind = r.get("failure_kind")
        reason = str(diagnosed)[:300] if isinstance(diagnosed, str) and diagnosed else _reason(r.get("reason"))
        rows.append([str(r[c]) for c in cols] + [r["status"], kind if isinstance(kind, str) else "", reason, str(r.get("run_dir", ""))])
    return Table(cols + ["status", "kind", "reason", "run"], rows)


def _reason(reason) -> str:
    # The last line of an error tail is the one that names the exception.
    text = "" if pd.isna(reason) else str(reason).strip()
    last = text.splitlines()[-1] if text else ""
    return last[:300]


# -- context: environment, grid, methodology -------------------------------------------------


def _values(s: pd.Series) -> str:
    vals = [num(v) if isinstance(v, (float, np.floating)) else str(v) for v in pd.unique(s.dropna())]
    return ", ".join(vals) if vals else "–"


# The provenance section, in reading order: (label, env column). Per-run measurements of
# the machine (load, other processes' CPU) are summarised as ranges, never listed per run.
PROVENANCE_ROWS = [
    ("host", "env_host"), ("CPU model", "env_cpu_model"), ("usable cores", "env_cores"), ("memory [GB]", "env_ram_gb"),
    ("OS", "env_os"), ("kernel", "env_kernel"), ("C library", "env_glibc"), ("GPU", "env_gpu_name"),
    ("backend", "env_backend"), ("threads per rank (actual)", "env_threads_per_rank"),
    ("Python", "env_python"), ("torch", "env_torch"), ("torchvision", "env_torchvision"), ("numpy", "env_numpy"),
    ("scipy", "env_scipy"), ("pandas", "env_pandas"), ("matplotlib", "env_matplotlib"), ("psutil", "env_psutil"),
    ("Snakemake", "env_snakemake"), ("CUDA", "env_cuda"), ("cuDNN", "env_cudnn"), ("NCCL", "env_nccl"),
    ("git commit", "env_git_commit"), ("uncommitted changes (diff hash)", "env_git_diff_hash"),
    ("code fingerprint", "env_code_fingerprint"), ("lock hash (uv.lock)", "env_lock_hash"),
    ("container image", "env_container_image"),
]  # fmt: skip
PER_RUN = ("env_started_utc", "env_ended_utc", "env_command", "env_loadavg_start", "env_loadavg_end",
           "env_other_cpu_s", "env_other_cpu_frac", "env_off_lock")  # fmt: skip


def _span(s: pd.Series) -> str:
    s = pd.to_numeric(s, errors="coerce").dropna()
    return "–" if s.empty else num(s.min()) if s.min() == s.max() else f"{num(s.min())}–{num(s.max())}"


def environment(runs: pd.DataFrame) -> list[tuple[str, str]]:
    """Where and with what the runs were made: when (UTC) and under what load, the machine,
    every package that shapes a number, the code (commit, diff, fingerprint) and the lock,
    then the thread- and device-selecting variables and anything else recorded."""
    rows: list[tuple[str, str]] = []
    if "env_started_utc" in runs and runs["env_started_utc"].notna().any():
        start, end = runs["env_started_utc"].dropna().min(), runs.get("env_ended_utc", runs["env_started_utc"]).dropna().max()
        rows.append(("measured (UTC)", f"{start} – {end} ({runs['env_started_utc'].notna().sum()} runs)"))
    if "env_loadavg_start" in runs:
        rows.append(("machine load at run start (1-min average)", _span(runs["env_loadavg_start"])))
    if "env_other_cpu_frac" in runs:
        rows.append(("other processes' share of the CPU while timed", _span(runs["env_other_cpu_frac"])))
    known = {col for _, col in PROVENANCE_ROWS} | set(PER_RUN)
    for label, col in PROVENANCE_ROWS:
        if col in runs and runs[col].notna().any():
            rows.append((label, _values(runs[col])))
    if "env_off_lock" in runs:
        off = A.text_column(runs, "env_off_lock")
        rows.append(("packages off the lock", _values(off[off != ""]) if (off != "").any() else "none"))
    rest = [c for c in runs.columns if c.startswith("env_") and c not in known and runs[c].notna().any()]
    rows += [(c.removeprefix("env_var_").removeprefix("env_"), _values(runs[c])) for c in rest]
    return rows


def provenance_warnings(runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame) -> list[str]:
    """What keeps runs apart or makes a number depend on the code it was made with."""
    out = []
    superseded = runs[runs["status"] == A.SUPERSEDED]
    if len(superseded):
        n_cells = superseded.groupby(A.axes(runs), dropna=False).ngroups
        out.append(f"{len(superseded)} run(s) in {n_cells} cell(s) were made by other code or packages than their "
                   "cell's newest runs: set aside (status superseded), never pooled; statistics use each cell's "
                   "newest version. `python -m ddpbench.plan.status --rerun` redoes them with the current code.")  # fmt: skip
    versions = A.run_version(runs[runs["status"] == "ok"]).nunique()
    if versions > 1:
        out.append(f"The cells were measured with {versions} different code versions or package sets (code "
                   "fingerprint, off-lock packages): comparisons across cells may include the change.")
    if "n_off_lock" in cells and cells["n_off_lock"].sum():
        out.append(f"{int(cells['n_off_lock'].sum())} run(s) used packages that differ from uv.lock (see 'packages "
                   "off the lock'); their cells say so in the flags column.")
    if "n_nondeterministic" in cells and cells["n_nondeterministic"].sum():
        n = int((cells["n_nondeterministic"] > 0).sum())
        out.append(f"{n} cell(s) have same-seed CPU repeats of equal length that ended with different parameters or "
                   "loss: something outside the recorded settings changed the arithmetic (determinism warning).")
    if "versions_differ" in speed and speed["versions_differ"].fillna(False).astype(bool).any():
        out.append(f"{int(speed['versions_differ'].fillna(False).astype(bool).sum())} speedup(s) divide times "
                   "measured with different code or packages (flagged in the table).")
    return out


def grid(runs: pd.DataFrame) -> dict:
    cols = A.axes(runs)
    shown = A.varying(runs, cols)
    fixed = [(c, _values(runs[c])) for c in cols if c not in shown]
    counts = runs["status"].value_counts()
    cells = runs.groupby(cols, dropna=False).ngroups
    return dict(
        axes=[(c, _values(runs[c].sort_values())) for c in shown],
        fixed=fixed,
        n_runs=len(runs),
        n_cells=cells,
        status=[(s, int(counts[s])) for s in ("ok", *STATUS_ORDER) if s in counts],
    )


def _coverage(kind: str) -> str:
    figures = A.TESTED_COVERAGE[kind]
    return ", ".join(f"{pct(v)} at n = {n}" for n, v in figures.items())


def methodology(runs: pd.DataFrame, cells: pd.DataFrame, n_boot: int, steps_given: bool, comm_given: bool,
                max_rel_ci: float = A.MAX_REL_CI) -> dict:  # fmt: skip
    ok = runs[runs["status"] == "ok"]
    span = lambda s: "0" if s.empty else num(s.min()) if s.min() == s.max() else f"{num(s.min())}–{num(s.max())}"  # noqa: E731
    get = lambda c: _values(runs[c]) if c in runs else "–"  # noqa: E731
    timed = f"{num(ok['timed_steps'].min())}–{num(ok['timed_steps'].max())}" if "timed_steps" in ok and len(ok) else "–"
    ns = sorted({int(n) for n in cells["n_repeats"] if n >= 2})
    return dict(
        warmup_steps=get("warmup_steps"),
        max_steps=get("max_steps"),
        epochs=get("epochs"),
        timed_steps=timed,
        launches=span(cells["n_runs"]),
        repeats=span(cells["n_repeats"]),
        n_boot=n_boot,
        level=pct(A.LEVEL),
        seed=A.SEED,
        seeds=get("seed"),
        threads=threads_text(runs),
        backend=_values(runs["env_backend"]) if "env_backend" in runs else "–",
        steps_given=steps_given,
        comm_given=comm_given,
        coverage_cells=f"{A.TESTED_COVERAGE['cells']:,}",
        coverage_log_t=_coverage("log_t"),
        coverage_welch=_coverage("welch"),
        median_levels=", ".join(f"{pct(A.order_stat_rank(n)[1])} at n = {n}" for n in ns) or "–",
        max_rel_ci=pct(max_rel_ci),
        run_cost=run_cost(ok),
        links=LINK_METHOD if not A.link_runs(runs).empty else "",
        **trust(runs, cells),
    )


def run_cost(ok: pd.DataFrame) -> str | None:
    """How much of a launch measures: the median run's timed and fixed seconds and the timed fraction
    over all ok runs (None for runs from before the timeline was recorded)."""
    if not {"fixed_cost_s", "timed_wall_s"} <= set(ok.columns):
        return None
    both = ok[["fixed_cost_s", "timed_wall_s"]].apply(pd.to_numeric, errors="coerce").dropna()
    if both.empty:
        return None
    fraction = both["timed_wall_s"].sum() / both.sum(axis=1).sum()
    return (f"a run's median launch cost {num(both['fixed_cost_s'].median())} s besides its "
            f"{num(both['timed_wall_s'].median())} s of timed steps; the timed steps are {100 * fraction:.0f}% of all "
            f"{len(both)} runs' wall time")


def threads_text(runs: pd.DataFrame) -> str:
    """threads_per_rank as configured: 0 means the rule, not zero threads."""
    if "threads_per_rank" not in runs:
        return "–"
    values = pd.unique(runs["threads_per_rank"].dropna())
    return ", ".join("auto (usable cores / ranks per node)" if str(v) in ("0", "0.0") else str(v) for v in values) or "–"


def trust(runs: pd.DataFrame, cells: pd.DataFrame) -> dict:
    """Counts that make numbers less trustworthy, for a warning next to the tables."""
    used = A.timed_runs(runs[runs["status"] == "ok"])
    return dict(
        n_unstable=int(cells["unstable"].sum()) if "unstable" in cells else 0,
        n_checked=int((cells["n_repeats"] >= 2).sum()),
        n_busy=int(A.busy_runs(used).sum()),
        n_oversubscribed=int(A.oversubscribed_runs(used).sum()),
        n_used=len(used),
    )


DEFINITIONS = [
    ("step time", "maximum over ranks of one step's time (the slowest rank sets the pace); the first step and the "
                  "warm-up steps are excluded from every timed figure"),
    ("throughput", "global samples processed in timed steps / timed wall time"),
    ("epoch time", "dataset size / throughput: the time of a fixed amount of work"),
    ("phases", "data wait, forward, backward, exposed communication, optimizer and other partition each step, "
               "attributed from one rank's timeline (the pacing rank), never a per-phase maximum over ranks; "
               "other = step time not in the pacing rank's named phases; communication overlapped with backward "
               "(DDP and its hooks) is reported separately and is not part of the step's sum"),
    ("imbalance", "time the fastest rank waits for the slowest: per step, maximum minus minimum compute over ranks; "
                  "its own quantity, never counted as communication"),
    ("compute / comm", "(forward + backward + optimizer) / exposed communication"),
    ("speedup", "S(p) = T_baseline / T_p with T the epoch time; baseline: the baseline strategy (default `single`) at p = 1 with every other axis "
                "equal (settings that cannot affect it relaxed), else the strategy's own p = 1 run"),
    ("scaled speedup", "weak scaling keeps the per-rank batch, so the same epoch takes p times fewer steps: "
                       "T_1/T_p = p·t_step(1)/t_step(p)"),
    ("efficiency", "E(p) = S(p) / p"),
    ("comparison", "throughput of strategy A / strategy B at equal settings and world size; a difference is called "
                   "only when the ratio's interval excludes 1"),
    ("unstable", "a cell whose throughput interval's relative half-width, (high − low)/2/estimate, exceeds the "
                 "stability threshold; its likely causes are named"),
    ("Amdahl", "T(p) = T(1)·(f + (1 − f)/p), f the serial fraction; nonlinear least squares on relative error with "
               "T(1) free; interval: Student t from the covariance; strong scaling only"),
    ("Gustafson", "S(p) = p − α(p − 1) for weak scaling; least squares through S(1) = 1; Student-t interval"),
    ("Karp–Flatt", "e(p) = (1/S − 1/p)/(1 − 1/p) at every measured p > 1, interval from the speedup's; "
                   "rising e means overhead growing with p; e > 1 happens exactly when S < 1 (the parallel run "
                   "was slower than one process) and is then overhead, not a serial fraction"),
    ("cost model", "T(p) = T_comp/p + T_comm(p) + T_sync per step, T_comm(p) = α·calls + v(p)·M/B with v the "
                   "strategy's volume law (all-reduce 2(p − 1)/p, gather/scatter p − 1, ZeRO 3(p − 1)/p, "
                   "point-to-point 1; all-reduce for runs that do not state it); M from the measured bytes under "
                   "the same law; α, B from the collective sweep when given, else from the measured "
                   "communication; T_comp, T_sync by least squares; T_sync absorbs overlap (may be negative); "
                   "intervals by resampling each world size's repeats and refitting"),
    ("bus bandwidth", "nccl-tests: algbw = M/t, busbw = algbw·2(p − 1)/p for all-reduce"),
    ("rank skew", "median over timed steps of (max − min)/max of the ranks' step times"),
    ("predictions", "model values at 2× and 4× the largest measured p: extrapolations, not measurements"),
]  # fmt: skip


PAGE_ANCHORS = ("comparisons", "speedup-table", "cells", "fits", "problems", "links")


def study_section(inp: Inputs, cells: pd.DataFrame, speed: pd.DataFrame, figures: list) -> dict:
    """The study's section for the templates: its question, answer, table and the figures it points
    to that this report has (in a grid of figure groups, the first group's)."""
    sec = studies.section(inp.study, inp.runs, cells, speed, inp.steps, inp.profile)
    anchors = {}
    for f in figures:
        anchors.setdefault(f.kind, ("fig-" + pathlib.Path(f.svg).stem, f.title))
    shown = [(anchors[k][1], anchors[k][0]) for k in sec.figures if k in anchors]
    return dict(name=sec.name, title=sec.title, question=sec.question, findings=sec.findings, figures=shown,
                table=Table(sec.columns, sec.rows, sec.note))


def linked_findings(found: list, figures: list) -> list:
    """Findings whose link points at something on the page: a table, or a figure this report
    has (in a grid of figure groups, the first group's figure of that name; a figure left out for
    lack of data sends the reader to the figures section)."""
    ids = set(PAGE_ANCHORS) | {"fig-" + pathlib.Path(f.svg).stem for f in figures}
    grouped = {}
    for f in figures:
        stem = pathlib.Path(f.svg).stem
        grouped.setdefault("fig-" + re.sub(r"^g\d+-", "", stem), "fig-" + stem)
    out = []
    for f in found:
        anchor = f.anchor if f.anchor in ids else grouped.get(f.anchor, "figures")
        out.append(f if anchor == f.anchor else dataclasses.replace(f, anchor=anchor))
    return out


# A report with more figures than this, or more bytes of them, links them as files under figures/
# (loaded when scrolled to) instead of inlining every SVG, so its entry page stays small (at
# 8,100 runs 30 figures were 7 MB); the folder stays self-contained.
INLINE_FIGURES = 30
INLINE_BYTES = 2_000_000


def figure_index(figures: list[dict]) -> list[dict]:
    """The figure groups in order: label, anchor and figures; one unnamed group for a grid without group axes."""
    groups: dict[str, dict] = {}
    for f in figures:
        g = groups.setdefault(f["group"], dict(label=f["group"], anchor=f"group-{len(groups) + 1}", figures=[]))
        g["figures"].append(f)
    return list(groups.values())


def captions() -> dict[str, str]:
    """Figure captions: the same text snakemake --report shows (report/captions/<kind>.rst)."""
    out = {}
    for path in sorted(CAPTIONS.glob("*.rst")):
        text = " ".join(path.read_text().split())
        out[path.stem] = re.sub(r"``?([^`]+)``?", r"\1", text)  # plain text: drop RST literals
    return out


# -- rendering -------------------------------------------------------------------------------

_SVG_HEAD = re.compile(r"^.*?(?=<svg)", re.S)


def inline_svg(path: pathlib.Path, prefix: str) -> str:
    """An SVG file as an inline element; ids prefixed so several figures never collide."""
    text = _SVG_HEAD.sub("", path.read_text())
    text = re.sub(r'id="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)


_TEX = {
    # Replacements that exist in the default OT1 encoding (no T1/lmodern needed).
    "\\": r"$\backslash$", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\~{}", "^": r"\^{}", "<": r"$<$", ">": r"$>$", "|": r"$|$",
    "–": "--", "—": "---", "−": "-", "×": r"$\times$", "α": r"$\alpha$", "·": r"$\cdot$", "²": r"$^2$",
    "≥": r"$\geq$", "≤": r"$\leq$", "∞": r"$\infty$", "→": r"$\rightarrow$", "`": "", "\n": " ", "\r": " ", "\t": " ",
    # Braced so that no value is read as an optional argument or a star: a cell starting with '[' after \\,
    # \rowcolor, \toprule or \midrule was taken for one ("Missing number", no PDF); a '*' after \\ vanished.
    "[": "{[}", "]": "{]}", "*": "{*}",
    # The Latin-1 characters pdflatex's utf8 input cannot set in OT1 (they need T1).
    "«": r"$\ll$", "»": r"$\gg$", "Ð": "D", "ð": "d", "Þ": "Th", "þ": "th",
}  # fmt: skip


class TexRaw(str):
    """Text already in LaTeX (e.g. a figure path); not escaped."""


@functools.lru_cache(maxsize=4096)
def _tex_char(ch: str) -> str:
    if ch in _TEX:
        return _TEX[ch]
    if ch.isascii():
        return ch if ch.isprintable() else ""  # control characters are invalid input to TeX
    if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
        return ""
    if ord(ch) <= 0xFF:
        return ch  # pdflatex+utf8 in OT1 sets Latin-1 (but the few in _TEX)
    ascii_ = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()  # 'ő' -> 'o', '＄' -> '$'
    return "".join(map(_tex_char, ascii_)) if ascii_ else "?"


def tex_escape(value) -> str:
    """Any text as LaTeX that sets it literally: specials escaped, brackets braced, control characters dropped,
    characters pdflatex cannot set in OT1 approximated in ASCII or '?'."""
    if isinstance(value, TexRaw):
        return value
    return "".join(map(_tex_char, str(value)))


_LONG_WORD = re.compile(r"\S{21,}")


def tex_cell(value, limit: int | None = None) -> TexRaw:
    """Text for a table cell or caption: at most `limit` characters (then '...'; an `l` column never wraps,
    so a long name would push the rest of the table off the page), and words longer than 20 characters
    breakable every 20 (a long name or path wraps in a `p` column instead of running over it)."""
    text = str(value)
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    out, pos = [], 0
    for word in _LONG_WORD.finditer(text):
        out.append(tex_escape(text[pos : word.start()]))
        out.append(r"\allowbreak{}".join(tex_escape(word[0][i : i + 20]) for i in range(0, len(word[0]), 20)))
        pos = word.end()
    out.append(tex_escape(text[pos:]))
    return TexRaw("".join(out))


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def html_text(value):
    """Drop the control characters HTML does not allow from a string (autoescaping does the rest)."""
    return value if isinstance(value, Markup) or not isinstance(value, str) else _CONTROL.sub("", value)


def _env(kind: str, templates: pathlib.Path) -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(templates))
    if kind == "html":
        return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined, finalize=html_text)
    # LaTeX-friendly delimiters; every printed value is escaped unless marked TexRaw.
    env = jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, autoescape=False,
        block_start_string="((*", block_end_string="*))", variable_start_string="(((",
        variable_end_string=")))", comment_start_string="((#", comment_end_string="#))",
        trim_blocks=True, lstrip_blocks=True, finalize=tex_escape,
    )  # fmt: skip
    env.filters["texraw"] = TexRaw  # macro output is LaTeX already
    env.filters["cell"] = tex_cell
    return env


def compile_pdf(tex: pathlib.Path, timeout: int = 600, assets: Iterable[str] = ()) -> tuple[bool, str]:
    """latexmk → PDF next to `tex`; returns (made, message). Without latexmk, says plainly that no PDF was made.

    The folder of `tex` may be someone else's: latexmk would run a latexmkrc found in its working folder
    as Perl. So it runs in a fresh private folder holding only copies of `tex` and `assets` (paths relative
    to tex's folder, e.g. the figures' PDFs), with -norc (no rc file of any folder, $HOME or the system is
    read) and -no-shell-escape; the PDF is copied back atomically, on failure the LaTeX log (tex's .log)."""
    if not shutil.which("latexmk"):
        return False, "No PDF was made: latexmk is not installed (Debian: texlive-latex-recommended texlive-latex-extra latexmk)."
    out, log = tex.parent, tex.with_suffix(".log")
    build = pathlib.Path(tempfile.mkdtemp(prefix="ddpbench-latex-"))
    try:
        shutil.copyfile(tex, build / tex.name)
        for rel in assets:
            (build / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / rel, build / rel)
        cmd = ["latexmk", "-norc", "-pdf", "-no-shell-escape", "-interaction=nonstopmode", "-halt-on-error",
               "-file-line-error", tex.name]  # fmt: skip
        try:
            proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=timeout)
            failed = f"latexmk failed (exit {proc.returncode})" if proc.returncode != 0 else ""
        except subprocess.TimeoutExpired:
            failed = f"latexmk exceeded {timeout} s"
        if not failed:
            safe_io.atomic_copy(build / tex.with_suffix(".pdf").name, tex.with_suffix(".pdf"))
            return True, f"PDF: {tex.with_suffix('.pdf')}"
        if (build / log.name).is_file():
            safe_io.atomic_copy(build / log.name, log)
            return False, f"No PDF was made: {failed}; see {log}."
        return False, f"No PDF was made: {failed}; no LaTeX log was written."
    finally:
        shutil.rmtree(build, ignore_errors=True)


@dataclass
class Inputs:
    runs: pd.DataFrame
    steps: pd.DataFrame | None = None
    comm: pd.DataFrame | None = None
    title: str = "ddpbench report"
    n_boot: int = A.N_BOOT
    sources: dict = field(default_factory=dict)
    baseline_strategy: str = A.BASELINE_STRATEGY
    max_rel_ci: float = A.MAX_REL_CI
    plan: list[str] = field(default_factory=list)  # the workflow's `ddpbench plan:` lines (ddpbench.plan.preflight)
    compare_to: str | None = None  # a stored result set: this report compares its runs against it
    profile: pd.DataFrame | None = None  # aggregate's profile.csv (runs with profile_steps > 0)
    study: str | None = None  # a study preset's name (studies.STUDIES): its section follows the findings


# Cells of a comparison named in the report (the rest are in comparison.csv / comparison.html).
COMPARISON_NAMED = 12


def comparison_section(base_path: str, runs: pd.DataFrame, out: pathlib.Path, baseline_strategy: str,
                       max_rel_ci: float) -> dict:  # fmt: skip
    """These runs (NEW) against a stored result set (BASE), as `ddpbench compare` judges them:
    comparison.csv and comparison.html beside the report, and what the report shows of them --
    what differs in the environments, the verdict counts, the cells that changed. A baseline that
    cannot be compared gives the reason instead of failing the report."""
    from ddpbench.report import compare  # here: compare reads report's provenance rows at its import

    try:
        base, csv = compare.read_side(base_path)
        cmp = compare.compare_frames(base, runs, base_name="baseline", new_name="these runs", max_rel_ci=max_rel_ci,
                                     baseline_strategy=baseline_strategy)  # fmt: skip
    except compare.InputError as err:
        return dict(base=str(base_path), error=f"not compared: {err}")
    cmp.base_path, cmp.new_path = str(csv), "these runs"
    compare.write(cmp, out, title=f"ddpbench comparison: these runs against {csv}")
    head = "samples_per_s"
    m = cmp.matched[cmp.matched["metric"] == head]
    changed = m[m["verdict"].isin([compare.SLOWER, compare.FASTER])]
    changed = changed.reindex(changed["ratio"].sub(1).abs().sort_values(ascending=False).index)
    rows = [[compare.cell_label(r, cmp.label_axes), num(r["base"]), num(r["new"]), compare.ratio_text(r), r["verdict"]]
            for _, r in changed.head(COMPARISON_NAMED).iterrows()]  # fmt: skip
    diff = cmp.provenance[cmp.provenance["differs"]]
    counts = cmp.counts()
    return dict(
        base=str(csv),
        error="",
        provenance=[(r["label"], r["base"], r["new"]) for _, r in diff.iterrows()],
        counts=[(c["label"], c["faster"], c["slower"], c["undecided"], c["not_compared"]) for _, c in counts.iterrows()],
        changed=Table(["cell", "baseline", "these runs", "ratio [95% interval]", "verdict"], rows,
                      f"throughput of the cells whose change the interval decides, largest first"
                      f"{f' ({len(changed) - COMPARISON_NAMED} more in comparison.csv)' if len(changed) > COMPARISON_NAMED else ''}"),
        one_sided=len(cmp.one_sided),
        warnings=cmp.warnings,
        noise=compare.noise_text(cmp.job_noise),
        finding=comparison_finding(counts, diff, len(cmp.one_sided), csv),
    )


def comparison_finding(counts: pd.DataFrame, diff: pd.DataFrame, one_sided: int, csv: pathlib.Path) -> Finding:
    """One sentence from the comparison's verdict counts (throughput) and provenance differences."""
    row = counts[counts["metric"] == "samples_per_s"]
    n_fast, n_slow, same, other = (int(row[c].sum()) for c in ("faster", "slower", "undecided", "not_compared"))
    what = (f" (differs: {', '.join(diff['label'].head(3))}{', ...' if len(diff) > 3 else ''})" if len(diff)
            else " (same recorded environment and code)")  # fmt: skip
    text = (f"Against the baseline {csv}{what}: throughput is slower in {n_slow}, faster in {n_fast} and not "
            f"detectably different in {same} of {n_fast + n_slow + same + other} cells (95 % intervals of the ratio).")
    if one_sided:
        text += f" {one_sided} cell(s) are on one side only."
    return Finding("warning" if n_slow else "winner", text, "comparison-section")


def _table(job: tuple[str, Inputs]):
    """One of the report's tables (speedup and fits together: the fits read the speedups)."""
    name, inp = job
    if name == "cells":
        return A.cell_stats(inp.runs, inp.max_rel_ci)
    if name == "comparisons":
        return A.comparisons_table(inp.runs, inp.max_rel_ci)
    speed = A.speedup_table(inp.runs, inp.baseline_strategy, inp.max_rel_ci)
    return speed, A.fits_table(inp.runs, speed, inp.comm, inp.baseline_strategy, inp.n_boot)


TABLE_JOBS = ("speedup+fits", "cells", "comparisons")  # the longest first


def start_tables(inp: Inputs, pool) -> dict:
    """cells, speedup and fits, and comparisons, computed side by side in `pool`'s workers (at 8,100
    runs they are 10-40 s of work), or here when none; each entry gives its table when called."""
    slim = dataclasses.replace(inp, steps=None)  # what the tables read; the steps table can be large
    if pool is None:
        return {name: functools.partial(_table, (name, slim)) for name in TABLE_JOBS}
    return {name: pool.apply_async(_table, ((name, slim),)).get for name in TABLE_JOBS}


def build(inp: Inputs, out: pathlib.Path, pdf: bool = True, templates: pathlib.Path = TEMPLATES) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    runs = inp.runs
    # No PDF, no PDF figures: at 8,100 runs they were a third of the report's time (report.tex
    # still compiles, saying where a figure was not drawn)
    formats = plots.FORMATS if pdf else ("svg",)
    with plots.worker_pool() as pool:  # one pool for the tables and the figures
        pending = start_tables(inp, pool)
        cells = pending["cells"]()
        # The figures of the runs and cells are drawn while the fits are still being computed
        none = pd.DataFrame()
        kinds = plots.kinds_for(studies.STUDIES[inp.study].figures if inp.study else ())
        early = plots.start_figures(plots.Data(runs, cells, none, none, inp.steps, inp.comm, profile=inp.profile), out, formats,
                                    [k for k in kinds if k not in plots.FITTED_KINDS], pool)  # fmt: skip
        speed, fits = pending["speedup+fits"]()
        comparisons = pending["comparisons"]()
        links = A.links_table(runs, inp.baseline_strategy)
        for name, table in (("cells", cells), ("speedup", speed), ("fits", fits), ("comparisons", comparisons),
                            ("links", links)):  # fmt: skip
            with safe_io.atomic_write(out / f"{name}.csv", newline="") as handle:
                table.to_csv(handle, index=False)
        data = plots.Data(runs, cells, speed, fits, inp.steps, inp.comm, profile=inp.profile)
        late = plots.start_figures(data, out, formats, [k for k in kinds if k in plots.FITTED_KINDS], pool)
        # The findings and the page's tables are written while the workers draw
        against = (comparison_section(inp.compare_to, runs, out, inp.baseline_strategy, inp.max_rel_ci)
                   if inp.compare_to else None)  # fmt: skip
        found = findings(runs, cells, speed, comparisons, fits, links=links, profile=inp.profile)
        shown = A.varying(runs, A.axes(runs)) or ["world_size"]
        ctx = dict(
            title=inp.title,
            sources=inp.sources,
            plan=inp.plan,
            against=against,
            environment=environment(runs),
            provenance_warnings=provenance_warnings(runs, cells, speed),
            grid=grid(runs),
            method=methodology(runs, cells, inp.n_boot, inp.steps is not None, inp.comm is not None, inp.max_rel_ci),
            definitions=DEFINITIONS,
            cells=cells_table(cells, shown),
            speedup=speedup_table(speed, shown),
            comparisons=comparisons_table(comparisons, shown),
            fits=fits_table(fits),
            links=links_tables(links),
            problems=problems_table(runs, shown),
        )
        figures = plots.collect(early, late)
    found = linked_findings(found, figures)
    ctx["study"] = study_section(inp, cells, speed, figures) if inp.study else None
    if against and not against["error"]:
        found.insert(0, against["finding"])
    caps = captions()
    ctx.update(
        findings=found,
        figures=[dict(title=f.title, kind=f.kind, caption=caps.get(f.kind, ""), svg=f.svg, pdf=TexRaw(f.pdf),
                      group=f.group) for f in figures],
        missing=[plots.TITLES[k] for k in plots.KINDS if k not in {f.kind for f in figures}],
    )

    tex_path = out / "report.tex"
    safe_io.atomic_write_text(tex_path, _env("tex", templates).get_template("report.tex.j2").render(**ctx))
    if pdf:
        made, pdf_msg = compile_pdf(tex_path, assets=[f.pdf for f in figures])
    else:
        made, pdf_msg = False, "No PDF was made: PDF compilation was switched off (--no-pdf)."
    svg_bytes = sum((out / f["svg"]).stat().st_size for f in ctx["figures"])
    inline = len(ctx["figures"]) <= INLINE_FIGURES and svg_bytes <= INLINE_BYTES
    for f in ctx["figures"]:
        f["svg_inline"] = Markup(inline_svg(out / f["svg"], f["svg"].split("/")[-1][:-4])) if inline else None
    groups = figure_index(ctx["figures"])
    html_path = out / "report.html"
    safe_io.atomic_write_text(html_path, _env("html", templates).get_template("report.html.j2").render(
        **ctx, pdf_message=pdf_msg, pdf_made=made, groups=groups if len(groups) > 1 else [], page_size=PAGE_SIZE))
    print(pdf_msg, file=sys.stderr)
    return html_path


def read_plan(path: pathlib.Path | None) -> list[str]:
    """The plan's lines without their prefix ([] when there is no plan file)."""
    if path is None or not pathlib.Path(path).is_file():
        return []
    lines = pathlib.Path(path).read_text(errors="replace").splitlines()
    return [line.removeprefix("ddpbench plan: ").strip()[:2000] for line in lines[:50] if line.strip()]


def _read_optional(path: str | None) -> pd.DataFrame | None:
    # An absent or empty optional table means "no such data", not an error.
    if not path or not pathlib.Path(path).exists() or pathlib.Path(path).stat().st_size == 0:
        return None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return None if df.empty else df


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpbench.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", help="aggregated runs.csv (required unless --from)")
    ap.add_argument("--from", dest="archive", metavar="ARCHIVE",
                    help="a study archive (python -m ddpbench.results.archive): its runs are aggregated again and the "
                         "report rebuilt into --out (tables in --out/aggregate); baseline and stability threshold "
                         "from its config unless given")
    ap.add_argument("--steps", help="aggregated steps.csv (loss and step-time figures)")
    ap.add_argument("--comm", help="collective sweep CSV (latency/bandwidth for the cost model)")
    ap.add_argument("--profile", help="aggregated profile.csv (default: profile.csv beside --runs, when there)")
    ap.add_argument("--study", choices=sorted(studies.STUDIES),
                    help="a study preset's name: the report answers its question in a section after the findings")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--title", default="ddpbench report")
    ap.add_argument("--bootstrap", type=int, default=A.N_BOOT,
                    help="bootstrap resamples of the cost model's intervals (default %(default)s)")
    ap.add_argument("--max-rel-ci", type=float, default=None,
                    help="stability threshold: a cell whose throughput interval's relative half-width exceeds it is "
                         f"flagged unstable (default {A.MAX_REL_CI})")
    ap.add_argument("--baseline-strategy", default=None,
                    help=f"strategy whose world-size-1 runs are the speedup baseline (default {A.BASELINE_STRATEGY})")
    ap.add_argument("--no-pdf", action="store_true",
                    help="write report.tex but do not run latexmk, nor draw the figures' PDFs (SVG only)")
    ap.add_argument("--log", type=pathlib.Path, help="write the output here; only the result line goes to stdout")
    ap.add_argument("--compare-to", metavar="RESULTS",
                    help="a stored result set (folder with aggregate/runs.csv, or a runs.csv): the report compares "
                         "these runs against it as `ddpbench compare RESULTS` would, and writes comparison.csv and "
                         "comparison.html beside it")
    ap.add_argument("--plan", type=pathlib.Path,
                    help="the workflow's plan (its `ddpbench plan:` lines, one a line), shown after the findings")
    args = ap.parse_args(argv)
    if bool(args.runs) == bool(args.archive):
        ap.error("give either --runs or --from ARCHIVE")
    with storage.output_to(args.log) as output:
        args.output = output
        try:
            if args.archive:
                return rebuild_from_archive(args)
            args.baseline_strategy = args.baseline_strategy or A.BASELINE_STRATEGY
            args.max_rel_ci = A.MAX_REL_CI if args.max_rel_ci is None else args.max_rel_ci
            return build_from_args(args)
        except OSError as err:  # a full disk or quota, a read-only folder: name it, keep the tables
            if not storage.is_storage_error(err):
                raise
            return storage.fail(output, err, what="report")


def rebuild_from_archive(args: argparse.Namespace) -> int:
    """Unpack the archive privately, aggregate its runs again (the same run folders the study
    aggregated, named as it named them), then build the report from those tables."""
    from ddpbench.results import aggregate, archive

    out = pathlib.Path(args.out).resolve()
    source = pathlib.Path(args.archive).resolve()
    with tempfile.TemporaryDirectory(prefix="ddpbench-archive-") as tmp, contextlib.chdir(tmp):
        results = archive.extract(source, pathlib.Path(tmp)).relative_to(tmp)
        listed = results / "aggregate" / "runs.csv"
        if listed.is_file():
            summaries = [str(pathlib.Path(d) / "summary.json") for d in pd.read_csv(listed)["run_dir"]]
            missing = [s for s in summaries if not pathlib.Path(s).is_file()]
            if missing:
                raise SystemExit(f"error: {source}: {len(missing)} run(s) its tables list are not in it, e.g. {missing[0]}")
        else:
            summaries = sorted(str(p) for p in results.glob("runs/**/summary.json"))
        tables = out / "aggregate"
        aggregate.aggregate(summaries, tables / "runs.csv", tables / "steps.csv")
        config = yaml.safe_load((results / "config.yaml").read_text()) if (results / "config.yaml").is_file() else {}
    config = config if isinstance(config, dict) else {}
    args.runs, args.steps = str(tables / "runs.csv"), str(tables / "steps.csv")
    args.baseline_strategy = args.baseline_strategy or (config.get("baseline") or {}).get("strategy") or A.BASELINE_STRATEGY
    if args.max_rel_ci is None:
        args.max_rel_ci = (config.get("timing") or {}).get("max_rel_ci", A.MAX_REL_CI)
    return build_from_args(args)


def build_from_args(args: argparse.Namespace) -> int:
    runs = A.load_runs(args.runs)
    profile = getattr(args, "profile", None) or aggregate.profile_path(args.runs)
    profile = str(profile) if pathlib.Path(profile).is_file() else None
    inp = Inputs(runs, _read_optional(args.steps), _read_optional(args.comm), args.title, args.bootstrap,
                 {"runs": args.runs, "steps": args.steps or "–", "comm": args.comm or "–", **({"profile": profile} if profile else {})},
                 args.baseline_strategy, args.max_rel_ci, read_plan(getattr(args, "plan", None)),
                 getattr(args, "compare_to", None), _read_optional(profile), getattr(args, "study", None))  # fmt: skip
    try:
        path = build(inp, pathlib.Path(args.out), pdf=not args.no_pdf)
    except safe_io.UnsafePathError as err:
        print(f"ddpbench report: {err}", file=sys.stderr)
        return 1
    args.output.say(str(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
