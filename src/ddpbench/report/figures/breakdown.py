"""Where the time goes: a step by phase, a run's wall time by span, a profiled step by operator.

Horizontal stacked bars, one per strategy (its name in its colour), one panel per combination
of the other axes: the pacing rank's phases per timed step (the communication hidden behind
compute hatched), the spans of a run's timeline from launch to exit, and the profiler's top
operators of a step (communication in red).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.layout import (MAX_PANELS, MAX_SERIES, TITLES, balanced_chunks, by_panel, panel_label,
                                            small_multiples, thin_panels)  # fmt: skip
from ddpbench.report.figures.marks import hbars
from ddpbench.report.figures.style import strategy_order, strategy_style, text
from ddpbench.report.figures.tables import Data


PHASES = [("phase_data_s", "data"), ("phase_forward_s", "forward"), ("phase_backward_s", "backward"),
          ("phase_optimizer_s", "optimizer"), ("phase_exposed_comm_s", "exposed comm")]  # fmt: skip
# Step time outside the pacing rank's named phases: drawn when runs carry it (older runs do not).
OTHER_PHASE = ("phase_other_s", "other")
PHASE_COLORS = ["#8c8c8c", "#4c72b0", "#55a868", "#ccb974", "#c44e52", "#dd8452"]  # data ... other


def _stacked_bars(ax, g: pd.DataFrame, segments, colors) -> np.ndarray:
    """One horizontal bar per row of `g` (a strategy), `segments` (column, name) stacked left to right;
    the strategy names as tick labels in their colours. Returns the bars' right ends."""
    pos = np.arange(len(g))  # positions, not categories: two rows whose shortened labels agree stay apart
    left = np.zeros(len(g))
    for (col, name), color in zip(segments, colors):
        v = g[col].fillna(0).to_numpy()
        hbars(ax, pos, v, left, label=name, facecolor=color)
        left += v
    ax.autoscale_view()
    ax.set_yticks(pos, [text(s, 18) for s in g["strategy"]])
    for tick, s in zip(ax.get_yticklabels(), g["strategy"]):
        tick.set_color(strategy_style(s)["color"])  # the strategy's colour, as in every other figure
    ax.set_ylim(len(g) - 0.5, -0.5)
    ax.grid(False, axis="y")
    return left


def fig_phases(d: Data):
    need = [c for c, _ in PHASES] + ["phase_comm_s", "timed_steps"]
    ok = d.runs[d.runs["status"] == "ok"]
    if ok.empty or not set(need) <= set(ok.columns) or ok[need].isna().all().all():
        return []
    phases = PHASES + ([OTHER_PHASE] if OTHER_PHASE[0] in ok and ok[OTHER_PHASE[0]].notna().any() else [])
    per_step = ok[[c for c, _ in phases] + ["phase_comm_s"]].div(ok["timed_steps"], axis=0)
    varying = A.varying(d.runs, A.axes(d.runs))
    cols = ["strategy", *[c for c in varying if c != "strategy"]]
    med = pd.concat([ok[cols], per_step], axis=1).groupby(cols, dropna=False, sort=True).median().reset_index()
    med["strategy"] = med["strategy"].astype(str)
    pcols = [c for c in varying if c != "strategy"]
    chunks = max(len(balanced_chunks(strategy_order(g["strategy"]), MAX_SERIES)) for _, g in by_panel(med, pcols))
    med, omitted = thin_panels(med, pcols, max(1, MAX_PANELS // chunks))
    panels = []
    for key, g in by_panel(med, pcols):
        order = strategy_order(g["strategy"])
        for part in balanced_chunks(order, MAX_SERIES):
            rows = g.set_index("strategy").loc[part].reset_index()
            panels.append((panel_label(pcols, key), rows))
    hidden_any = ((med["phase_comm_s"] - med["phase_exposed_comm_s"]).clip(lower=0).fillna(0) > 0).any()

    def draw(ax, g):
        left = _stacked_bars(ax, g, phases, PHASE_COLORS)
        hidden = (g["phase_comm_s"] - g["phase_exposed_comm_s"]).clip(lower=0).fillna(0).to_numpy()
        if hidden_any:
            hbars(ax, np.arange(len(g)), hidden, left, label="overlapped comm (hidden)", facecolor="none",
                  edgecolor="gray", hatch="///")  # fmt: skip
            ax.autoscale_view(scaley=False)

    n_rows = max(len(g) for _, g in panels)
    return small_multiples(f"{TITLES['phases']} (median over repeats; pacing rank)", panels, draw,
                           xlabel="seconds per timed step", ylabel="strategy (label colour: as in every figure)",
                           sharex=True, panel_size=(3.0, 0.45 + 0.3 * n_rows),
                           ncols=None if len(panels) > 2 else len(panels), omitted=omitted)  # fmt: skip


# Where a run's wall time goes, launch to exit (summary.json timeline): the spans of
# core.run_output.TIMELINE_SPANS, a few merged so the legend stays short; the timed steps stand out.
RUN_SPANS = [
    (("launcher", "launcher_finish"), "launcher", "#bdbdbd"),
    (("torchrun",), "torchrun start", "#969696"),
    (("imports",), "imports", "#737373"),
    (("process_group",), "process group", "#9ecae1"),
    (("setup",), "setup (data, model, optimizer)", "#6baed6"),
    (("warmup",), "warm-up steps", "#fdae6b"),
    (("timed_steps",), "timed steps (the measurement)", "#d62728"),
    (("evaluation", "results"), "evaluation and results", "#a1d99b"),
    (("teardown",), "teardown", "#525252"),
]


def fig_fixed_cost(d: Data):
    """Median seconds per run in each span of its timeline, one bar per strategy, one panel per
    world size: how much of a launch measures and where the fixed cost goes."""
    cols = {label: [f"timeline_{s}_s" for s in spans] for spans, label, _ in RUN_SPANS}
    need = [c for cs in cols.values() for c in cs]
    ok = d.runs[d.runs["status"] == "ok"]
    if ok.empty or not set(need) <= set(ok.columns) or ok[need].isna().all().all():
        return []
    per_run = pd.DataFrame({label: ok[cs].sum(axis=1, min_count=1) for label, cs in cols.items()})
    per_run[["strategy", "world_size"]] = ok[["strategy", "world_size"]].astype({"strategy": str})
    med = per_run.groupby(["strategy", "world_size"], sort=True).median().reset_index()
    panels = []
    for p, g in med.groupby("world_size", sort=True):
        order = strategy_order(g["strategy"])
        for part in balanced_chunks(order, MAX_SERIES):
            panels.append((f"p={int(p)}", g.set_index("strategy").loc[part].reset_index()))
    segments = [(label, label) for _, label, _ in RUN_SPANS]
    colors = [c for *_, c in RUN_SPANS]
    n_rows = max(len(g) for _, g in panels)
    return small_multiples("Where a run's wall time goes, launch to exit (median per run)", panels,
                           lambda ax, g: _stacked_bars(ax, g, segments, colors), xlabel="seconds per run",
                           ylabel="strategy (label colour: as in every figure)", sharex=True,
                           panel_size=(3.0, 0.45 + 0.3 * n_rows),
                           ncols=None if len(panels) > 2 else len(panels))  # fmt: skip


# -- the profiler's breakdown of a step (profile_steps > 0) ----------------------------------------

PROFILE_TOP = 8  # operators drawn per panel; the rest of the step is one bar
PROFILE_COLORS = {"communication": "#c44e52", "compute": "#4c72b0", "rest": "#bdbdbd"}


def fig_profile(d: Data):
    """One panel per profiled cell: its top operators by self time (milliseconds per profiled step,
    mean over ranks, median over repeats) as bars, communication in red, the rest of the step as
    one grey bar."""
    if d.profile is None or d.profile.empty:
        return []
    cols = [c for c in ("strategy", *A.varying(d.runs, A.axes(d.runs))) if c in d.profile]
    cols = list(dict.fromkeys(cols))
    table = A.profile_cells(d.profile, cols)
    table, omitted = thin_panels(table, cols)
    panels = []
    order = {s: i for i, s in enumerate(strategy_order(table["strategy"].astype(str).unique()))} if "strategy" in table else {}
    for key, g in sorted(by_panel(table, cols), key=lambda kg: (order.get(str(dict(zip(cols, kg[0])).get("strategy")), 0), kg[0])):
        named = g[g["op"] != "other"].sort_values("self_s", ascending=False)
        top = named.head(PROFILE_TOP)
        rest = g["self_s"].sum() - top["self_s"].sum()
        bars = pd.DataFrame({"op": [text(o, 28) for o in top["op"]] + ["other operators, rest of step"],
                             "ms": [*(1e3 * top["self_s"]), 1e3 * rest],
                             "kind": ["communication" if c else "compute" for c in top["comm"]] + ["rest"]})  # fmt: skip
        act = g["activity"].iloc[0]
        panels.append((panel_label(cols, key) + ("" if act == "cpu" else f" ({act})"), bars))

    def draw(ax, bars):
        pos = np.arange(len(bars))
        for kind, color in PROFILE_COLORS.items():
            sel = (bars["kind"] == kind).to_numpy()
            if sel.any():
                label = {"communication": "communication operator", "compute": "compute operator",
                         "rest": "other operators and time outside any (rest of the step)"}[kind]  # fmt: skip
                hbars(ax, pos[sel], bars["ms"].to_numpy()[sel], np.zeros(sel.sum()), label=label, facecolor=color)
        ax.autoscale_view()
        ax.set_yticks(pos, list(bars["op"]))
        ax.set_ylim(len(bars) - 0.5, -0.5)
        ax.set_xlim(left=0)
        ax.grid(False, axis="y")

    rows = max((len(b) for _, b in panels), default=1)
    return small_multiples(f"{TITLES['profile']} (torch.profiler self time; mean over ranks, median over repeats)",
                           panels, draw, xlabel="milliseconds per profiled step",
                           ylabel="operator (the top ones by self time)",
                           panel_size=(3.2, 0.45 + 0.28 * rows),
                           ncols=None if len(panels) > 2 else len(panels), omitted=omitted)  # fmt: skip
