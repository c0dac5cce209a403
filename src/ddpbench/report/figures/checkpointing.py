"""Activation checkpointing side by side with none: what recomputing the activations costs in
throughput and saves in peak memory, per cell.

Per combination of the panel axes (compile among them: a panel never mixes eager and compiled
cells) two panels side by side. Left: the throughput of each strategy and world size at every
checkpointing setting measured, one horizontal bar per setting in the strategy's colour (none
solid, selective and full hatched), its 95 % interval; right: the same cells' measured peak (the
largest rank's peak RSS on CPU, peak CUDA allocation on a GPU; median over repeats with its
order-statistic interval), in MiB. Only cells whose twin without checkpointing (every other axis
equal) was measured are drawn. Drawn where the grid varies activation_checkpointing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.layout import (MAX_LEGEND, MAX_PANELS, MAX_SERIES, TITLES, balanced_chunks, by_panel,
                                            panel_label, small_multiples, thin_panels)  # fmt: skip
from ddpbench.report.figures.marks import hbar_intervals, hbars, level_note
from ddpbench.report.figures.style import strategy_label, strategy_order, strategy_style, text
from ddpbench.report.figures.tables import Data

AXIS = "activation_checkpointing"
HATCHES = {"none": None, "selective": "//", "full": "xx"}  # a setting the harness adds later: "..", hatched too


def _setting_label(value) -> str:
    return text(f"{AXIS}={value}")


def _with_twins(c: pd.DataFrame) -> pd.DataFrame:
    """The cells of groups (every axis but the checkpointing equal) that have none and at least one other setting."""
    others = [a for a in A.axes(c) if a != AXIS]
    key = c[others].astype(str).agg("|".join, axis=1) if others else pd.Series("", index=c.index)
    settings = c[AXIS].astype(str)
    has_none = settings.eq(A.NO_CHECKPOINTING).groupby(key).transform("any")
    several = settings.groupby(key).transform("nunique") > 1
    return c[has_none & several]


def _rows(ax, g: pd.DataFrame) -> None:
    """The y axis: one row per strategy, world size and setting, labelled in the strategy's colour."""
    pos = np.arange(len(g))
    ax.autoscale_view()
    ax.set_xlim(left=0)
    ax.set_yticks(pos, [text(f"{s}, p={int(p)}, {v}", 30) for s, p, v in zip(g["_strategy"], g["_p"], g[AXIS])])
    for tick, s in zip(ax.get_yticklabels(), g["_strategy"]):
        tick.set_color(strategy_style(s)["color"])
    ax.set_ylim(len(g) - 0.5, -0.5)
    ax.grid(False, axis="y")


def _draw(ax, g: pd.DataFrame, m: str) -> None:
    val = g[m].to_numpy(float)
    for i, (s, v, setting) in enumerate(zip(g["_strategy"], val, g[AXIS].astype(str))):
        if np.isfinite(v):
            hatch = HATCHES.get(setting, "..")
            style = dict(hatch=hatch, edgecolor="black") if hatch else {}
            hbars(ax, [i], [v], [0.0], facecolor=strategy_style(s)["color"],
                  label=strategy_label(s) if not hatch else None, **style)  # fmt: skip
    for setting in dict.fromkeys(g[AXIS].astype(str)):  # the settings' key: white bars of no width, hatched
        hatch = HATCHES.get(setting, "..")
        hbars(ax, [0], [0.0], [0.0], facecolor="white", edgecolor="black", hatch=hatch or "", label=_setting_label(setting))
    hbar_intervals(ax, g[f"{m}_ci_low"], g[f"{m}_ci_high"])
    _rows(ax, g)


def fig_checkpointing(d: Data):
    c = d.cells
    if c.empty or AXIS not in c or "strategy" not in c or c[AXIS].astype(str).nunique() < 2:
        return []
    c = c[pd.to_numeric(c["n_repeats"], errors="coerce") > 0] if "n_repeats" in c else c
    c = _with_twins(c)
    if c.empty:
        return []
    thr, unit = A.throughput_metric(c)
    c = pd.concat([c, A.peaks(c).rename(columns={"peak_mib": "peak"})], axis=1)  # peak, peak_ci_low, ...: MiB
    order = {s: i for i, s in enumerate(HATCHES)}
    c = c.assign(_strategy=c["strategy"].astype(str), _p=pd.to_numeric(c["world_size"], errors="coerce"),
                 _s=c[AXIS].astype(str).map(lambda v: order.get(v, len(order))))  # fmt: skip
    metrics = [(thr, f"throughput [{unit}]")] + ([("peak", "peak memory [MiB] (max over ranks)")]
                                                 if c["peak"].notna().any() else [])  # fmt: skip
    pcols = [a for a in d.panel_axes if a in c and a != AXIS]
    settings = list(dict.fromkeys(c.sort_values("_s")[AXIS].astype(str)))
    per_figure = max(1, min(MAX_SERIES, MAX_LEGEND - len(settings)))
    out = []
    for chunk in balanced_chunks(strategy_order(c["_strategy"].unique()), per_figure):
        sub, omitted = thin_panels(c[c["_strategy"].isin(chunk)], pcols, max(1, MAX_PANELS // len(metrics)))
        panels = []
        for key, g in by_panel(sub, pcols):
            g = g.assign(_o=g["_strategy"].map({s: i for i, s in enumerate(chunk)})).sort_values(["_o", "_p", "_s"])
            where = panel_label(pcols, key) if pcols else ""
            panels += [(where or label, (g, m, label)) for m, label in metrics]
        if not panels:
            continue
        n_rows = max(len(g) for _, (g, _, _) in panels)

        def draw(ax, payload):
            g, m, label = payload
            ax.set_xlabel(label)
            _draw(ax, g, m)

        note = f"throughput: geometric mean, {level_note(c, thr)}" + (
            f"; peak: median, {level_note(c, 'peak')}" if len(metrics) > 1 else "")  # fmt: skip
        out += small_multiples(f"{TITLES['checkpointing']} ({note})", panels, draw, xlabel=None,
                               ylabel="strategy, world size p, checkpointing", ncols=len(metrics),
                               panel_size=(2.8, 0.45 + 0.3 * n_rows),
                               legend_order=[strategy_label(s) for s in chunk] + [_setting_label(s) for s in settings],
                               omitted=omitted)  # fmt: skip
    return out
