"""The report's context sections: where and with what the runs were made (the environment and
what keeps runs apart), the grid that was measured, the methodology and the definitions.

The environment lists the fields in analysis.provenance's order (PROVENANCE_ROWS, the same
labels the comparison's provenance diff uses); per-run measurements of the machine (load, other
processes' CPU) are summarised as ranges, never listed per run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.analysis.provenance import MEASURED, OFF_LOCK, PER_RUN, PROVENANCE_ROWS
from ddpbench.core.run_record import Env, env_label, is_env_column
from ddpbench.report.tables import pct
from ddpbench.report.text import num

STATUS_ORDER = ("failed", "timeout", "skipped", "superseded")


# -- environment -----------------------------------------------------------------------------


def _values(s: pd.Series) -> str:
    vals = [num(v) if isinstance(v, (float, np.floating)) else str(v) for v in pd.unique(s.dropna())]
    return ", ".join(vals) if vals else "–"


def _span(s: pd.Series) -> str:
    s = pd.to_numeric(s, errors="coerce").dropna()
    return "–" if s.empty else num(s.min()) if s.min() == s.max() else f"{num(s.min())}–{num(s.max())}"


def environment(runs: pd.DataFrame) -> list[tuple[str, str]]:
    """Where and with what the runs were made: when (UTC) and under what load, the machine,
    every package that shapes a number, the code (commit, diff, fingerprint) and the lock,
    then the thread- and device-selecting variables and anything else recorded."""
    rows: list[tuple[str, str]] = []
    if Env.started_utc in runs and runs[Env.started_utc].notna().any():
        start, end = runs[Env.started_utc].dropna().min(), runs.get(Env.ended_utc, runs[Env.started_utc]).dropna().max()
        rows.append(("measured (UTC)", f"{start} – {end} ({runs[Env.started_utc].notna().sum()} runs)"))
    for label, col in MEASURED:
        if col in runs:
            rows.append((label, _span(runs[col])))
    known = {col for _, col in PROVENANCE_ROWS} | set(PER_RUN)
    for label, col in PROVENANCE_ROWS:
        if col in runs and runs[col].notna().any():
            rows.append((label, _values(runs[col])))
    if OFF_LOCK[1] in runs:
        off = A.text_column(runs, OFF_LOCK[1])
        rows.append((OFF_LOCK[0], _values(off[off != ""]) if (off != "").any() else "none"))
    rest = [c for c in runs.columns if is_env_column(c) and c not in known and runs[c].notna().any()]
    rows += [(env_label(c), _values(runs[c])) for c in rest]
    return rows


def provenance_warnings(runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame) -> list[str]:
    """What keeps runs apart or makes a number depend on the code it was made with."""
    out = []
    superseded = runs[runs["status"] == A.SUPERSEDED]
    if len(superseded):
        n_cells = superseded.groupby(A.axes(runs), dropna=False).ngroups
        out.append(f"{len(superseded)} run(s) in {n_cells} cell(s) were made by other code or packages than their "
                   "cell's newest runs: set aside (status superseded), never pooled; statistics use each cell's "
                   "newest version. `ddpbench status --rerun` redoes them with the current code.")  # fmt: skip
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


# -- grid and methodology -------------------------------------------------------------------


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
        backend=_values(runs[Env.backend]) if Env.backend in runs else "–",
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
    ("throughput", "global samples processed in timed steps / timed wall time, in samples/s; for token data (the "
                   "language models) also in tokens/s = samples/s × seq_len (a sample is one sequence)"),
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
    ("step model", "step = compute + the communication the step waits for, from parts measured on these runs and each "
                   "strategy's schedule; checked on held-out cells in every report (Predictions); "
                   "beyond what was held out: past the largest world size or slowest link a hold-out checked"),
]  # fmt: skip

