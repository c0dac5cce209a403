"""Memory held per rank against the world size: what each strategy keeps, and its measured peak.

Per combination of the panel axes two panels side by side. Left: one horizontal bar per strategy
and world size, stacked from the bytes a rank holds for training — parameters, gradients,
optimizer state — counted from its own tensors (its shards under zero and the FSDP strategies;
the largest rank's; exact, the same in every repeat). Right: the same cells' measured peak (the
largest rank's peak RSS on CPU, peak CUDA allocation on a GPU; median over repeats with its
order-statistic interval), in the strategy's colour. Both in MiB (2^20 bytes: the unit the peaks
are recorded in). Drawn when the cells carry the held bytes (runs that counted them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.layout import (MAX_LEGEND, MAX_PANELS, MAX_SERIES, TITLES, balanced_chunks, by_panel,
                                            panel_label, small_multiples, thin_panels)  # fmt: skip
from ddpbench.report.figures.marks import hbar_intervals, hbars, level_note, strategy_rows
from ddpbench.report.figures.style import strategy_label, strategy_order, strategy_style
from ddpbench.report.figures.tables import Data
from ddpbench.strategies import REFERENCE

PART_COLORS = ["#4c72b0", "#dd8452", "#55a868"]  # parameters, gradients, optimizer state (never a strategy's)
HELD_LABEL = "held per rank [MiB]"


def _peak_label(kinds) -> str:
    kinds = sorted({k for k in kinds if k})
    if kinds == ["peak RSS"]:
        return "peak RSS [MiB] (max over ranks)"
    if kinds == ["peak CUDA allocated"]:
        return "peak CUDA allocated [MiB] (max over ranks)"
    return "peak [MiB] (CUDA allocated on GPU cells, else RSS; max over ranks)"


def _draw_held(ax, g: pd.DataFrame) -> None:
    pos = np.arange(len(g))
    left = np.zeros(len(g))
    for (col, name), color in zip(A.HELD_PARTS, PART_COLORS):
        v = (pd.to_numeric(g[col], errors="coerce") / A.MIB).fillna(0).to_numpy(float) if col in g else np.zeros(len(g))
        hbars(ax, pos, v, left, facecolor=color, label=name)
        left += v
    strategy_rows(ax, g)


def _draw_peak(ax, g: pd.DataFrame) -> None:
    val = g["peak_mib"].to_numpy(float)
    for i, (s, v) in enumerate(zip(g["_strategy"], val)):
        if np.isfinite(v):
            hbars(ax, [i], [v], [0.0], facecolor=strategy_style(s)["color"], label=strategy_label(s))
    hbar_intervals(ax, g["peak_ci_low"], g["peak_ci_high"])
    strategy_rows(ax, g)


def _reading_order(names) -> list[str]:
    """The baseline, ddp, then the sharded strategies from least to most sharded, then the rest as coloured:
    the bars shrink down the panel."""
    first = [A.BASELINE_STRATEGY, REFERENCE, *A.SHARDED]
    names = list(dict.fromkeys(names))
    return [s for s in first if s in names] + [s for s in strategy_order(names) if s not in first]


def fig_memory_held(d: Data):
    c = d.cells
    if c.empty or "strategy" not in c or "world_size" not in c or not A.has_held(c):
        return []
    c = c[pd.to_numeric(c[A.HELD], errors="coerce").notna()]
    if "n_repeats" in c:
        c = c[pd.to_numeric(c["n_repeats"], errors="coerce") > 0]
    if c.empty:
        return []
    c = pd.concat([c, A.peaks(c)], axis=1)
    c = c.assign(_strategy=c["strategy"].astype(str), _p=pd.to_numeric(c["world_size"], errors="coerce"))
    pcols = [a for a in d.panel_axes if a in c]
    with_peak = bool(c["peak_mib"].notna().any())
    peak_label = _peak_label(c["peak_kind"])
    metrics = [("held", HELD_LABEL)] + ([("peak", peak_label)] if with_peak else [])
    # the legend: the three parts, and the strategies of the peak bars
    per_figure = max(1, min(MAX_SERIES, MAX_LEGEND - len(A.HELD_PARTS)))

    def draw(ax, payload):
        g, which = payload
        ax.set_xlabel(dict(metrics)[which])
        (_draw_held if which == "held" else _draw_peak)(ax, g)

    out = []
    for chunk in balanced_chunks(_reading_order(c["_strategy"].unique()), per_figure):
        sub, omitted = thin_panels(c[c["_strategy"].isin(chunk)], pcols, max(1, MAX_PANELS // len(metrics)))
        panels = []
        for key, g in by_panel(sub, pcols):
            g = g.assign(_o=g["_strategy"].map({s: i for i, s in enumerate(chunk)})).sort_values(["_o", "_p"])
            where = panel_label(pcols, key) if pcols else ""
            panels += [(where or label, (g, which)) for which, label in metrics]
        if not panels:
            continue
        n_rows = max(len(g) for _, (g, _) in panels)
        note = "held: counted from each rank's own tensors, exact" + (
            f"; peak: median, {level_note(c, 'peak')}" if with_peak else ""
        )
        out += small_multiples(f"{TITLES['memory_held']} ({note})", panels, draw, xlabel=None,
                               ylabel="strategy, world size p", ncols=len(metrics),
                               panel_size=(2.8, 0.45 + 0.3 * n_rows),
                               legend_order=[name for _, name in A.HELD_PARTS] + [strategy_label(s) for s in chunk],
                               omitted=omitted)  # fmt: skip
    return out
