"""Throughput against the batch or dataset size (kinds "batch" and "dataset", anchors
"fig-throughput_vs_batch" and "fig-dataset_size").

Where batch_size (dataset_size) varies, the best strategy's throughput at the largest value over
that at the smallest, at the largest world size where both exist: a Welch log-t ratio over the
runs when they are given, else the ratio of the two cells' estimates, labelled so; where a
sequential design ran, its verdict and interval if it asked that pair, else the Welch one
labelled descriptive.
"""

from __future__ import annotations

import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import (AXIS_TEXT, Finding, best_cell, cell_name, matching_rows, ok_runs,
                                             row_num)  # fmt: skip
from ddpbench.report.text import SETTING_WORDS, SOURCE_WORDS, finite, ratio_text, sig3, value_text, verdict_word

# What a ratio that is no difference says of a change in the setting (the others: text.SETTING_WORDS)
CHANGE_WORDS = {analysis.Verdict.NO_DIFFERENCE: "no detectable change (interval holds 1)",
                analysis.Verdict.EQUIVALENT: "equivalent within the design's margin",
                analysis.Verdict.UNDECIDED: "left undecided by the design"}  # fmt: skip

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {
    "batch": dict(find=lambda t: axis_findings("batch_size", "batch", "fig-throughput_vs_batch", t.runs, t.cells, t.speed, t.shown,
                                               t.design), at_most=1, order=60, trim=60, drop=40),  # fmt: skip
    "dataset": dict(find=lambda t: axis_findings("dataset_size", "dataset", "fig-dataset_size", t.runs, t.cells, t.speed, t.shown,
                                                 t.design), at_most=1, order=70, trim=70, drop=30),  # fmt: skip
}


def axis_findings(axis: str, kind: str, anchor: str, runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame,
                  shown: list[str], design: analysis.DesignAnswers | None = None) -> list[Finding]:  # fmt: skip
    if cells.empty or axis not in cells or "samples_per_s" not in cells or cells[axis].astype(str).nunique() < 2:
        return []
    best = best_cell(cells, speed)
    c = cells[cells["samples_per_s"].notna()]
    if best is not None and "strategy" in c and "strategy" in best:
        c = c[c["strategy"].astype(str) == str(best["strategy"])]
    values = pd.to_numeric(c[axis], errors="coerce")
    if values.notna().sum() < 2 or values.min() == values.max():
        return []
    lo_v, hi_v = values.min(), values.max()
    rest = [a for a in analysis.axes(c) if a != axis]
    candidates = []
    for _, g in c.groupby(rest, dropna=False, sort=False) if rest else [((), c)]:
        v = pd.to_numeric(g[axis], errors="coerce")
        if (v == lo_v).any() and (v == hi_v).any():
            candidates.append((g[v == lo_v].iloc[0], g[v == hi_v].iloc[0]))
    if not candidates:
        return []
    ws = lambda pair: row_num(pair[0], "world_size") if "world_size" in pair[0] else 0  # noqa: E731
    small, large = max(candidates, key=ws)
    found = None
    ok = ok_runs(runs)
    if not ok.empty and "samples_per_s" in ok:
        cols = analysis.axes(ok)
        a = matching_rows(ok, large, cols)["samples_per_s"].dropna()
        b = matching_rows(ok, small, cols)["samples_per_s"].dropna()
        if len(a) and len(b):  # the design's answer where it asked this pair, else the runs' Welch ratio
            asked = design if all(c in large for c in cols) else None
            found = analysis.compare_pair(asked, {c: large.get(c) for c in cols}, {c: small.get(c) for c in cols}, a, b)
    name = cell_name(large, [s for s in shown if s != axis])
    label = AXIS_TEXT.get(axis, axis)
    if found is not None and finite(found.low) and finite(found.high):
        rv = ratio_text(found.ratio, found.low, found.high, found.level)
        verdict = CHANGE_WORDS.get(found.verdict) or verdict_word(found.verdict, SETTING_WORDS)
        if design is not None:  # a design ran: whose interval this is
            verdict += f" ({SOURCE_WORDS[found.source]})"
    else:
        est = found.ratio if found is not None else row_num(large, "samples_per_s") / row_num(small, "samples_per_s")
        rv = f"{sig3(est)}× (ratio of the two cells' estimates, no interval)"
        verdict = "no interval to judge the change by"
    text = f"For {name}, throughput at {label} {value_text(hi_v)} is {rv} that at {label} {value_text(lo_v)}: {verdict}."
    return [Finding(kind, text, anchor)]
