"""The report's tables as rows of text: cells, speedup, strategy comparisons, fits, links and
the runs that are not ok, each a `Table` (columns, rows, a note, a CSS class per row) that the
HTML and LaTeX templates lay out. Numbers are formatted by `report.text`; the statistics come
from analysis/ (cells.csv, speedup.csv, comparisons.csv, fits.csv, links.csv).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.core.run_record import Extra
from ddpbench.report.text import SOURCE_WORDS, as_verdict, bandwidth_text, inside_margin, num, verdict_word, with_ci

# Metrics shown in the cells table (the CSV has all of them).
CELL_TABLE = ["step_time_median_s", "samples_per_s", "tokens_per_s", "epoch_time_s", "frac_comm", "peak_rss_mb",
              Extra.mfu_measured, Extra.hfu_measured, Extra.energy_per_sample_j, Extra.compile_s]  # fmt: skip
# Of those, the ones shown only where some cell has a value (runs from before MFU, HFU or the compile time were
# recorded have none; tokens/s: token data only; compile time: compiled cells only).
WHERE_MEASURED = ("tokens_per_s", Extra.mfu_measured, Extra.hfu_measured, Extra.energy_per_sample_j, Extra.compile_s)


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
    metrics = [m for m in CELL_TABLE if m in cells and (m not in WHERE_MEASURED or cells[m].notna().any())]
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
    if _from_a_design(cells):
        note += (" Where the design asked a cell's precision, its throughput interval is the design's (as in 'What the "
                 "design decided', whose note says whether it includes the variation between rounds) and UNSTABLE "
                 "means the design's precision target was not met; the other metrics' intervals are descriptive, "
                 "not the design's.")  # fmt: skip
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
    columns = shown + ["measure", "baseline", "repeats", "epoch time [s]", "S(p)", "E(p)", "flags"]
    note = ("S = geometric-mean baseline epoch time / geometric-mean epoch time [95% Welch t-interval on the "
            "log ratio]; E = S/p with S's interval over p; UNSTABLE: the cell or its baseline is unstable (the cause "
            "in the flags)")  # fmt: skip
    if _from_a_design(speed):
        for row, (_, r) in zip(rows, speed.iterrows()):
            row.insert(len(shown) + 6, SOURCE_WORDS.get(r["interval_from"], str(r["interval_from"])))
        columns.insert(len(shown) + 6, "interval")
        note += ("; interval: the design's (its repeated 95% interval on the throughput ratio, as in 'What the design "
                 "decided') where it asked the cell against the baseline, else Welch's, descriptive only")  # fmt: skip
    return Table(columns, rows, note, classes)


def _from_a_design(table: pd.DataFrame) -> bool:
    """Whether a sequential design's answers were an input of the table (its interval_from)."""
    return "interval_from" in table and not (table["interval_from"] == A.Source.WELCH).all()


def speedup_flags(r) -> str:
    flags = [f"UNSTABLE: {r['unstable_cause']}"] if bool(r.get("unstable", False)) else []
    if bool(r.get("versions_differ", False)):
        flags.append("cell and baseline measured with different code or packages")
    return "; ".join(flags)


def verdict_text(r) -> str:
    """A comparisons row's verdict naming the faster strategy ('ddp faster')."""
    v = as_verdict(r["verdict"])
    if v is None or not v.difference:
        return verdict_word(r["verdict"])
    text = f"{r['strategy_a' if v == A.Verdict.FASTER else 'strategy_b']} faster"
    if inside_margin(r["ratio_ci_low"], r["ratio_ci_high"], r.get("margin")):
        text += ", by less than the margin"
    return text


def comparisons_table(cmp: pd.DataFrame, shown: list[str]) -> Table:
    """Strategy against strategy at equal settings: detected differences first, largest first."""
    if cmp.empty:
        return Table([], [], "no comparison: no setting was measured with two strategies")
    setting = [c for c in shown if c != "strategy" and c in cmp] or ["world_size"]
    order = cmp.assign(_diff=cmp["verdict"].isin([A.Verdict.FASTER, A.Verdict.SLOWER]), _size=np.abs(np.log(cmp["ratio"])))
    order = order.sort_values(["_diff", "_size"], ascending=[False, False], kind="stable")
    rows = [[str(r[c]) for c in setting]
            + [f"{r['strategy_a']} / {r['strategy_b']}", with_ci(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"]),
               verdict_text(r), f"{int(r['n_a'])} / {int(r['n_b'])}",
               f"UNSTABLE: {r['unstable_cause']}" if bool(r["unstable"]) else ""]
            for _, r in order.iterrows()]  # fmt: skip
    n_diff = int(order["_diff"].sum())
    classes = ["unstable" if bool(r["unstable"]) else "" for _, r in order.iterrows()]
    if _from_a_design(order):  # say where each row's interval comes from
        for row, (_, r) in zip(rows, order.iterrows()):
            row.insert(len(setting) + 3, SOURCE_WORDS.get(r["interval_from"], str(r["interval_from"])))
        n_design = int((order["interval_from"] == A.Source.DESIGN).sum())
        which = "Each is one of the design's questions" if n_design == len(order) else \
            f"{n_design} are the design's questions"  # fmt: skip
        rest = "" if n_design == len(order) else (
            " The others it did not ask about: a 95% Welch t-interval on the log ratio, descriptive only (collected by "
            "the design's rounds, not for them).")  # fmt: skip
        return Table(setting + ["A / B", "throughput ratio A/B", "verdict", "interval", "repeats", "flags"], rows,
                     f"{n_diff} of {len(order)} comparisons show a difference. {which}: "
                     "their verdict and interval are the design's (its repeated 95% interval, as in 'What the design "
                     f"decided').{rest}", classes)  # fmt: skip
    return Table(setting + ["A / B", "throughput ratio A/B", "verdict", "repeats", "flags"], rows,
                 f"{n_diff} of {len(order)} comparisons show a difference. Ratio of geometric-mean throughputs "
                 "[95% Welch t-interval on the log ratio]; a difference is called only when the interval excludes 1.",
                 classes)  # fmt: skip



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
