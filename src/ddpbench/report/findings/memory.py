"""What sharding saves in memory per rank and what it costs in time (kind "memory", anchor
"fig-memory_held").

Spoken only where memory is the point: a sharded strategy (zero, fsdp_grad_op, fsdp) measured
beside ddp at the same settings (world size included), with the bytes each rank holds counted
(analysis.memory_savings). One sentence per sharded strategy, over every setting it shares with
ddp: the memory it holds per rank against ddp's (counted, exact: MiB and ratio, and which parts
it shards), then the time it costs, its throughput over ddp's with the Welch interval; "slower"
or "faster" only where that interval excludes 1, "no detectable difference" where it holds 1,
no verdict without an interval. Where a sequential design ran, a pair it asked about reads its
verdict and interval, the others are labelled descriptive (analysis.memory_savings' design input).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, row_num, setting_text
from ddpbench.report.text import finite, listing, ratio_text, row_verdict, sig3, source_text, verdict_word

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"memory": dict(find=lambda t: memory_findings(t.runs, t.cells, t.shown, t.design), at_most=3, order=20,
                        trim=100, drop=70)}

ANCHOR = "fig-memory_held"
# What a throughput ratio says, in the order the sentence gives them (the last two: a design's verdicts)
TIME_ORDER = (analysis.Verdict.SLOWER, analysis.Verdict.FASTER, analysis.Verdict.NO_DIFFERENCE,
              analysis.Verdict.EQUIVALENT, analysis.Verdict.UNDECIDED, analysis.Verdict.NO_INTERVAL)  # fmt: skip
SHARDS = 0.99  # a part held at most this fraction of ddp's counts as sharded


def mib(nbytes) -> str:
    """Bytes as '27.3 MiB' (3 significant digits)."""
    return f"{sig3(float(nbytes) / analysis.MIB)} MiB" if finite(nbytes) else "–"


def sharded_parts(rows: pd.DataFrame) -> list[str]:
    """The parts (parameters, gradients, optimizer state) the strategy holds less of than ddp in every setting."""
    return [name for col, name in analysis.HELD_PARTS
            if f"{col}_ratio" in rows and (pd.to_numeric(rows[f"{col}_ratio"], errors="coerce") <= SHARDS).all()]  # fmt: skip


def _span(values: pd.Series, fmt) -> str:
    lo, hi = values.min(), values.max()
    return fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"


def held_text(rows: pd.DataFrame, reference: str) -> str:
    """'holds 6.83 MiB per rank against ddp's 27.3 MiB (0.250×, 20.5 MiB less)': per world size where
    there are several, a range where the settings of one world size differ."""
    by_p = (
        rows.groupby(pd.to_numeric(rows["world_size"], errors="coerce"), sort=True)
        if "world_size" in rows
        else [(None, rows)]
    )
    clauses = []
    for p, g in by_p:
        held, ref = g["held_bytes"].astype(float), g["reference_held_bytes"].astype(float)
        saved = g["saved_bytes"].astype(float)
        if (saved > 0).all():
            less = f"{_span(saved, mib)} less"
        elif (saved == 0).all():
            less = "the same"
        elif (saved < 0).all():
            less = f"{_span(-saved, mib)} more"
        else:
            less = "less in some settings, more in others"
        at = (
            f" at world size {sig3(p) if p != int(p) else int(p)}"
            if p is not None and rows["world_size"].nunique() > 1
            else ""
        )
        clauses.append(f"{_span(held, mib)} per rank{at} against {reference}'s {_span(ref, mib)} "
                       f"({_span(g['held_ratio'].astype(float), lambda x: sig3(x) + '×')}, {less})")  # fmt: skip
    return "holds " + "; ".join(clauses)


def time_text(rows: pd.DataFrame, reference: str, where_cols: list[str], total: int) -> str:
    """The throughput over the reference's, grouped by what the interval says; each setting named when few."""
    groups: dict[tuple, list] = {}
    for _, r in rows.iterrows():
        est, lo, hi = row_num(r, "ratio"), row_num(r, "ratio_ci_low"), row_num(r, "ratio_ci_high")
        v = row_verdict(r)  # the interval decides, not a column; where a design asked the pair, its verdict
        v = v if v in TIME_ORDER else analysis.Verdict.NO_INTERVAL  # (a design's open question: no verdict yet)
        groups.setdefault((v, source_text(r)), []).append(
            (est, lo, hi, r.get("ratio_ci_level", np.nan), setting_text(r, where_cols)))
    parts = []
    for v, source in sorted(groups, key=lambda k: (TIME_ORDER.index(k[0]), k[1])):
        items = sorted(groups[v, source], key=lambda it: it[0] if finite(it[0]) else np.inf)
        first, last = ratio_text(*items[0][:4]), ratio_text(*items[-1][:4])
        value = first if first == last else f"{first} to {last}"
        each = " at each" if len(items) > 1 and first == last else ""
        at = ""
        if total > 1:
            named = [it[4] for it in items if it[4]]
            at = (" at every setting measured" if len(items) == total
                  else f" at {listing(named, sep='; ')}" if named else f" at {len(items)} of {total} settings")  # fmt: skip
        if v == analysis.Verdict.NO_INTERVAL:
            parts.append(f"its throughput is {value} {reference}'s{each}{at} (fewer than 2 repeats on a side: no "
                         "interval, no verdict)")  # fmt: skip
        elif v == analysis.Verdict.NO_DIFFERENCE:
            parts.append(
                f"{verdict_word(v)} in throughput{at} ({value} {reference}'s{each}; the interval holds 1{source})"
            )
        elif v in (analysis.Verdict.EQUIVALENT, analysis.Verdict.UNDECIDED):
            said = "equivalent within the design's margin" if v == analysis.Verdict.EQUIVALENT else "left undecided by the design"
            parts.append(f"its throughput is {said}{at} ({value} {reference}'s{each})")
        else:
            parts.append(f"it is {verdict_word(v)}{at}: throughput {value} {reference}'s{each}{f' ({source[2:]})' if source else ''}")
    return "; ".join(parts)


def memory_findings(runs: pd.DataFrame, cells: pd.DataFrame, shown: list[str],
                    design: analysis.DesignAnswers | None = None) -> list[Finding]:  # fmt: skip
    if cells.empty or not analysis.has_held(cells):
        return []
    savings = analysis.memory_savings(runs, cells, design=design)
    if savings.empty:
        return []
    setting = [c for c in savings.columns if c not in analysis.SAVING_COLUMNS]
    where_cols = [c for c in setting if c in shown or c == "world_size"]
    out = []
    for strategy in [s for s in analysis.SHARDED if s in set(savings["strategy"])]:
        rows = savings[savings["strategy"] == strategy]
        ref = str(rows["reference"].iloc[0])
        parts = sharded_parts(rows)
        what = f"{strategy} shards its {listing(parts)}: it" if parts else strategy
        one = setting_text(rows.iloc[0], where_cols) if len(rows) == 1 else ""
        where = f" at {one}" if one else " at every setting measured" if len(rows) > 1 else ""
        text = f"{what} {held_text(rows, ref)}{where}; the time it costs: {time_text(rows, ref, where_cols, len(rows))}"
        unstable = int(rows["unstable"].map(analysis.truthy).sum())
        text += f" ({unstable} of these comparisons unstable)." if unstable else "."
        out.append(Finding("memory", text, ANCHOR))
    return out
