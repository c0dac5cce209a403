"""Communication figures: throughput and communication against the link's measured bandwidth, and
the collective sweep's bus bandwidth against message size.
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.layout import MAX_SERIES, TITLES, balanced_chunks, by_panel, panel_label, small_multiples
from ddpbench.report.figures.marks import level_note, strategy_series
from ddpbench.report.figures.style import ordered_colors, strategy_label, strategy_order
from ddpbench.report.figures.tables import Data, numeric


def bandwidth_tick(gbps: float) -> str:
    """A bandwidth in Gbit/s as a tick label: '10 Gbit/s', '100 Mbit/s', '500 kbit/s' (the shortest form;
    report.text.bandwidth_text keeps 3 significant digits for sentences)."""
    for scale, unit in ((1, "Gbit/s"), (1e-3, "Mbit/s"), (1e-6, "kbit/s")):
        if gbps >= scale:
            return f"{gbps / scale:.3g} {unit}"
    return f"{gbps * 1e9:.3g} bit/s"


LINK_REF = "single process (p = 1)"


def fig_link(d: Data):
    """Per link study (A.link_group_axes: one panel row per combination), three panels against the
    bandwidth each link achieved (the probe's, log scale): throughput with the single process's as a
    dashed line, communication and exposed communication per step. Strategies are the series; drawn
    only with two links or more."""
    on_link = A.link_runs(d.runs)
    if on_link.empty or on_link["link"].astype(str).nunique() < 2:
        return []
    cols = A.axes(on_link)
    col = lambda c: numeric(on_link[c]) if c in on_link else pd.Series(np.nan, index=on_link.index)  # noqa: E731
    per_step = on_link.assign(_x=col(A.ACHIEVED) / 1e9, _comm=col("phase_comm_s") / col("timed_steps"),
                              _exposed=col("phase_exposed_comm_s") / col("timed_steps"))  # fmt: skip
    # Per cell: medians over its runs (comm per step), as cells.csv has the throughput's geometric mean.
    runs_med = per_step.groupby(cols, dropna=False, sort=True)[["_x", "_comm", "_exposed"]].median().reset_index()
    c = d.cells
    x = numeric(c["link_gbps"]) if "link_gbps" in c else pd.Series(np.nan, index=c.index)
    on = (x > 0) & (numeric(c["nodes"]) > 1 if "nodes" in c else True)
    cells = c[on].assign(_x=x[on])
    base = d.cells[(d.cells["strategy"].astype(str) == A.BASELINE_STRATEGY) & (numeric(d.cells["world_size"]) == 1)]
    pcols = A.link_group_axes(on_link)
    thr, unit = A.throughput_metric(cells)  # tokens/s for token data
    metrics = [(thr, f"throughput [{unit}]"), ("_comm", "communication per step [s]"),
               ("_exposed", "exposed communication per step [s]")]  # fmt: skip
    strategies = strategy_order(runs_med["strategy"].astype(str).unique())
    out = []
    for chunk in balanced_chunks(strategies, MAX_SERIES):
        panels = []
        for key, g in by_panel(runs_med[runs_med["strategy"].astype(str).isin(chunk)], pcols):
            info = dict(zip(pcols, key))
            where = panel_label(pcols, key)
            sel = A.matching(cells, info)
            # The single process at these settings: world size and what cannot matter to it aside.
            ref = A.matching(base, {k: v for k, v in info.items() if k not in (*A.LAUNCH_AXES, *A.IRRELEVANT_AT_BASELINE)})
            for m, ylabel in metrics:
                frame = sel if m == thr else g
                if len(frame) and m in frame and frame[m].notna().any():
                    panels.append((f"{ylabel}\n{where}" if pcols else ylabel, (frame, m, ylabel, ref)))

        def draw(ax, payload, chunk=chunk):
            g, m, ylabel, ref = payload
            strategy_series(ax, g, chunk, g["strategy"].astype(str), "_x", m)
            if m == thr and len(ref) and m in ref and ref[m].notna().any():
                ax.axhline(float(ref[m].median()), ls="--", color="gray", lw=1, label=LINK_REF)
            ax.set_xscale("log")
            # few labelled decades: a panel is ~2.7 inches wide and "100 Mbit/s" is long
            ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, numticks=4))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: bandwidth_tick(v)))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            y = g[m].dropna()
            if len(y) and (y > 0).all() and y.max() >= 10 * y.min():  # log only where it spans a decade
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            else:
                ax.set_ylim(bottom=0)
            ax.set_ylabel(ylabel)

        notes = level_note(cells, thr)
        out += small_multiples(f"{TITLES['link']} (throughput {notes}; communication: medians)", panels, draw,
                               xlabel="link bandwidth achieved (TCP probe at the cell's start; log scale)",
                               ylabel=None, ncols=len(metrics),
                               legend_order=[strategy_label(s) for s in chunk] + [LINK_REF])  # fmt: skip
    return out


def fig_comm_sweep(d: Data):
    cm = d.comm
    if cm is None or cm.empty:
        return []
    cm = cm.assign(collective=cm["collective"].astype(str), device=cm["device"].astype(str))
    ps = sorted(cm["world_size"].unique())
    colors = dict(zip(ps, ordered_colors(len(ps))))
    panels = []
    for key, g in by_panel(cm, ["collective", "device"]):
        for part in balanced_chunks(sorted(g["world_size"].unique()), MAX_SERIES):
            panels.append((panel_label(["collective", "device"], key), g[g["world_size"].isin(part)]))

    def draw(ax, g):
        for p, r in g.groupby("world_size", sort=True):
            r = r.sort_values("bytes")
            ax.plot(r["bytes"], r["busbw_gbps"], marker=".", color=colors[p], label=f"p={p}")
        ax.set_xscale("log", base=2)

    figs = small_multiples(TITLES["comm_sweep"], panels, draw, xlabel="message size [bytes] (log scale)",
                           ylabel="bus bandwidth [GB/s] (nccl-tests definition)",
                           legend_order=[f"p={p}" for p in ps])  # fmt: skip
    return [(None, f) for f in figs]
