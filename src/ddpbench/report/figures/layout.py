"""Small multiples and their layout: panels, titles, the shared legend, and sizes computed once.

Figures are small multiples drawn with matplotlib's own subplots (`small_multiples`): one panel
per combination of the grid's axes that are not on the plot (batch size, dataset size, model,
...), at most `MAX_SERIES` series per panel, one shared legend per figure below the panels (at
most `MAX_LEGEND` entries), a title on every figure (`TITLES`, then the figure group's label)
and panel, axis labels with units. A grid with more than `MAX_PANELS` panels is split into
parts (at most `MAX_PARTS`; `thin_panels` first draws fewer values of each axis, keeping its
range, and the title names the rest). The layout is computed once from the measured lengths of
the figure's texts (`place`), so labels never overlap and each figure is drawn exactly once
when saved. Plain matplotlib rather than seaborn or plotly: it is already a dependency (seaborn
is not in the lock), it gives full control of the layout and of the SVG and PDF backends (text
kept as text, deterministic files), and small multiples need nothing more than subplots.
"""

from __future__ import annotations

import contextvars
import functools
import math
import textwrap

import matplotlib.cbook
import matplotlib.font_manager
import matplotlib.text
import matplotlib.textpath
import matplotlib.ticker
import numpy as np
import pandas as pd

from ddpbench.report.figures.style import RC, plt, text


MAX_SERIES = 8  # lines or points per panel
MAX_LEGEND = 10  # entries of a figure's legend
MAX_PANELS = 12  # panels per figure; more are split into <kind>_2, <kind>_3, ...
MAX_PARTS = 2  # figures of one kind (per strategy chunk) in a figure group; further panels are left out, said so
PANEL_W, PANEL_H = 2.7, 2.2  # inches


TITLES = {
    "speedup": "Speedup vs workers",
    "efficiency": "Parallel efficiency vs workers",
    "phases": "Time per step by phase",
    "throughput_vs_batch": "Throughput vs batch size",
    "dataset_size": "Time, speedup and efficiency vs dataset size",
    "loss": "Training loss vs step",
    "step_time": "Step time vs step",
    "memory_vs_batch": "Peak memory vs batch size",
    "memory_held": "Memory held per rank vs workers",
    "mfu": "Model FLOP utilisation (MFU) against the measured peak",
    "energy": "Energy per sample (the timed steps' average power over throughput)",
    "checkpointing": "Activation checkpointing against none: throughput and peak memory",
    "karp_flatt": "Karp–Flatt serial fraction vs workers",
    "rank_skew": "Rank skew vs workers",
    "comm_sweep": "All-reduce bus bandwidth vs message size",
    "fixed_cost": "Where a run's wall time goes",
    "link": "Throughput and communication vs link bandwidth",
    "profile": "Where a profiled step's time goes, by operator",
    "epoch_throughput": "Throughput per epoch",
    "strategy_bars": "Time per round, throughput and accuracy per strategy",
    "throughput": "Throughput vs workers",
    "epoch_time": "Epoch time vs workers",
}


def balanced_chunks(items: list, size: int) -> list[list]:
    """`items` in balanced chunks of at most `size`."""
    if not items:
        return []
    k = math.ceil(len(items) / size)
    per = math.ceil(len(items) / k)
    return [items[i : i + per] for i in range(0, len(items), per)]


# -- small multiples -------------------------------------------------------------------------


def panel_label(cols: list[str], key: tuple) -> str:
    return text(", ".join(_short(c, v) for c, v in zip(cols, key))) if cols else "all runs"


def by_panel(df: pd.DataFrame, cols: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """(key, rows) per combination of `cols`, sorted."""
    if not cols:
        return [((), df)]
    out = []
    for key, g in df.groupby(cols, dropna=False, sort=True):
        out.append((key if isinstance(key, tuple) else (key,), g))
    return out


def thin_panels(df: pd.DataFrame, cols: list[str], limit: int = MAX_PANELS) -> tuple[pd.DataFrame, str]:
    """The rows of at most `limit` panels (combinations of `cols`), and a note naming the values left
    out. While there are more, the axis with the most values keeps one fewer, the ones it keeps
    spread evenly from its first to its last, so each figure still spans every axis's range (its
    first `limit` panels alone would show only the smallest values); every value is in the tables."""
    cols = [c for c in cols if c in df]
    if not cols or df.empty or df.groupby(cols, dropna=False).ngroups <= limit:
        return df, ""
    levels = {c: list(df.groupby(c, dropna=False, sort=True).size().index) for c in cols}
    count = {c: len(v) for c, v in levels.items()}

    def kept(c):
        v, k = levels[c], count[c]
        return [v[i] for i in sorted({round(j * (len(v) - 1) / max(k - 1, 1)) for j in range(k)})]

    rows = df
    while rows.groupby(cols, dropna=False).ngroups > limit and max(count.values()) > 1:
        c = max(reversed(cols), key=lambda c: count[c])  # the most values; a tie: the innermost axis
        count[c] -= 1
        keep = np.ones(len(df), bool)
        for c2 in cols:
            keep &= df[c2].isin(kept(c2)).to_numpy()  # (isin matches NaN with NaN)
        rows = df[keep]
    left = [_short(c, ", ".join(str(v) for v in levels[c] if v not in kept(c))) for c in cols if count[c] < len(levels[c])]
    return rows, "not drawn, in the tables: " + "; ".join(left)


# The figure group being drawn (set by _draw_group): every figure's title ends with it, so it is
# laid out with the title rather than appended and laid out again.
GROUP_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("GROUP_LABEL", default="")


def floor_at_zero(ax) -> None:
    """Start the y axis at 0 and keep autoscaling its top: ax.set_ylim(bottom=0) inside a panel's draw
    would freeze the top at the data drawn so far, which on panels sharing y (sharey) clips every later
    panel's larger values (issue 58: an MFU figure's fp32 panels drawn empty below the bf16 panels' top).
    An invisible line at 0 whose sticky edge stops the autoscale's margin there does it instead."""
    line = ax.axhline(0.0, lw=0, alpha=0)
    line.sticky_edges.y.append(0.0)


def small_multiples(title: str, panels: list, draw, *, xlabel: str | None, ylabel: str | None,
                    ncols: int | None = None, sharex=False, sharey=False, panel_size=(PANEL_W, PANEL_H),
                    legend_title: str | None = None, legend_order=None, omitted: str = ""):  # fmt: skip
    """Figures of small multiples: `panels` is a list of (panel title, payload); `draw(ax, payload)`
    draws one panel. At most MAX_PANELS panels a figure; one shared legend below the panels."""
    figs = []
    parts = [panels[i : i + MAX_PANELS] for i in range(0, len(panels), MAX_PANELS)]
    shown = min(len(panels), MAX_PARTS * MAX_PANELS)
    left_out = f"; panels 1–{shown} of {len(panels)}, the rest in the tables" if shown < len(panels) else ""
    parts = parts[:MAX_PARTS]
    for part_no, part in enumerate(parts, 1):
        n = len(part)
        cols = ncols or (1 if n == 1 else 2 if n in (2, 4) else 3)
        cols = min(cols, n)
        rows = math.ceil(n / cols)
        # Panels of about their final size from the start: the tick locators choose by a panel's length
        w, h = panel_size
        width, height = cols * w + (cols + 1) * 0.8, rows * h + (rows + 1) * 0.6
        fig, axs = plt.subplots(rows, cols, squeeze=False, sharex=sharex, sharey=sharey, figsize=(width, height))
        fig.subplots_adjust(left=0.8 / width, right=1 - 0.8 / width, bottom=0.6 / height, top=1 - 0.6 / height,
                            wspace=0.8 / w, hspace=0.6 / h)  # (not gridspec_kw: place() adjusts the same parameters)
        fig.ddpbench_panel_size = panel_size  # read by place(), which sizes the figure around the panels
        for ax, (ptitle, payload) in zip(axs.flat, part):
            draw(ax, payload)
            ax.set_title(ptitle, fontsize=9, y=1.0)  # a fixed place: matplotlib measured the axis for each draw
        for ax in axs.flat[n:]:
            ax.remove()
        for ax in axs.flat[:n]:
            bottom = ax.get_subplotspec().rowspan.stop == rows or _below_is_empty(ax, n, cols)
            if bottom and xlabel:  # on each column's lowest panel, not a figure label the legend could cover
                ax.set_xlabel(xlabel if cols == 1 else textwrap.fill(xlabel, 34))
            elif sharex:  # shared axes: tick labels on the outer panels only
                ax.tick_params(labelbottom=False)
        more = f" ({part_no} of {len(parts)}{left_out})" if len(parts) > 1 else ""
        group = GROUP_LABEL.get()
        fig.suptitle(title + more + (f" ({omitted})" if omitted else "") + (f" — {group}" if group else ""), fontsize=10)
        if ylabel:
            fig.supylabel(ylabel, fontsize=9)
        _figure_legend(fig, legend_title, legend_order)
        place(fig)
        figs.append(fig)
    return figs


# -- layout: computed once from the lengths of the figure's texts -------------------------------
#
# matplotlib's constrained layout measured every text of every panel on every save, and
# bbox_inches="tight" drew the figure once more to crop it: at 8,100 runs that was 45 % of the
# time to write an SVG. place() measures the few texts that decide the margins (tick labels,
# titles, axis labels, legend entries) with the font itself, sizes the figure around panels of
# a fixed size and positions everything once; saving then draws the figure exactly once.

PAD_IN = 0.08  # inches around the figure's edge
_TEXT_TO_PATH = matplotlib.textpath.TextToPath()


def _text_size(s: str, size: float, rotation: float = 0.0) -> tuple[float, float]:
    """(width, height) in inches of `s` (lines split on newlines) at `size` points, after rotation."""
    if not s:
        return 0.0, 0.0
    return _measured(s, size, rotation, str(plt.rcParams["font.family"]), str(plt.rcParams["font.sans-serif"]))


@functools.lru_cache(maxsize=8192)  # tick labels repeat on every panel: each was measured anew
def _measured(s: str, size: float, rotation: float, *font) -> tuple[float, float]:
    prop = matplotlib.font_manager.FontProperties(size=size)
    lines = s.split("\n")
    widths = [_TEXT_TO_PATH.get_text_width_height_descent(line, prop, matplotlib.cbook.is_math_text(line))[0]
              for line in lines]  # fmt: skip
    w, h = max(widths) / 72, len(lines) * size * 1.25 / 72
    return (h, w) if round(rotation) % 180 == 90 else (w, h)


def _label_extent(labels, size: float) -> tuple[float, float]:
    """Widest and tallest of some tick labels, inches."""
    dims = [_text_size(t.get_text(), size, t.get_rotation()) for t in labels if t.get_visible() and t.get_text()]
    return max((w for w, _ in dims), default=0.0), max((h for _, h in dims), default=0.0)


def _wrap(t: matplotlib.text.Text, width_in: float) -> float:
    """Wraps a title to `width_in` inches (from its one-line form); returns its height in inches."""
    s = " ".join(t.get_text().split("\n"))
    size = t.get_fontsize()
    w, _ = _text_size(s, size)
    if w > width_in and len(s) > 10:
        s = textwrap.fill(s, max(10, int(len(s) * width_in / w)))
    t.set_text(s)
    return _text_size(s, size)[1]


def place(fig) -> None:
    """Sizes `fig` (made by small_multiples) around its panels and positions panels, titles, the y label and
    the legend so that no text overlaps another or leaves the figure; call again after a title changes.
    The tick labels (how many, how long) depend on the panels' size: small_multiples makes the panels about
    their final size before they are drawn, and the ticks measured here are then fixed."""
    _place(fig)
    for ax in fig.axes:  # the ticks measured are the ticks drawn (and not computed again at each draw)
        for axis in (ax.xaxis, ax.yaxis):
            _freeze_ticks(axis)


def _freeze_ticks(axis) -> None:
    """The axis's major ticks and labels, as its locator and formatter give them now, fixed."""
    locs = axis.get_majorticklocs()
    formatter = axis.get_major_formatter()
    labels = formatter.format_ticks(locs)
    fixed = matplotlib.ticker.FixedFormatter(labels)
    fixed.set_offset_string(formatter.get_offset())  # '1e6' above a scalar axis, for instance
    axis.set_major_locator(matplotlib.ticker.FixedLocator(locs))
    axis.set_major_formatter(fixed)


def _place(fig) -> None:
    w_panel, h_panel = fig.ddpbench_panel_size
    axs = list(fig.axes)
    rows, cols = axs[0].get_subplotspec().get_gridspec().get_geometry()
    tick, labelpad = 7 / 72, 4 / 72  # tick length and pad; axis label pad (matplotlib's defaults)
    deco = {}  # per panel: y tick labels and y label left of it; x tick labels and x label below it; title above it
    for ax in axs:
        yw, _ = _label_extent(ax.yaxis.get_majorticklabels(), RC["ytick.labelsize"])
        xw, xh = _label_extent(ax.xaxis.get_majorticklabels(), RC["xtick.labelsize"])
        ticks_left, ticks_below = (yw + tick if yw else 0.05), (xh + tick if xh else 0.05)
        ylabel_w = _text_size(ax.get_ylabel(), RC["axes.labelsize"])[1] + labelpad if ax.get_ylabel() else 0
        xlabel_h = _text_size(ax.get_xlabel(), RC["axes.labelsize"])[1] + labelpad if ax.get_xlabel() else 0
        # the y axis's offset or multiplier ('1e6') sits above the panel, where the title goes: room for both
        offset = ax.yaxis.get_major_formatter().get_offset() if ax.yaxis.get_visible() else ""
        offset_h = _text_size(offset, RC["ytick.labelsize"])[1] if offset else 0.0
        deco[ax] = dict(left=ticks_left + ylabel_w, below=ticks_below + xlabel_h, right=xw / 2, title=0.0,
                        ticks_left=ticks_left, ticks_below=ticks_below, offset=offset_h)  # fmt: skip
    first_col = [ax for ax in axs if ax.get_subplotspec().colspan.start == 0]
    inner = [deco[ax]["left"] for ax in axs if ax not in first_col]
    wspace = max(inner, default=0.0) + 0.12
    supy = fig.get_supylabel()
    left = PAD_IN + (_text_size(supy, 9)[1] + 0.05 if supy else 0) + max(deco[ax]["left"] for ax in first_col)
    last_col = [ax for ax in axs if ax.get_subplotspec().colspan.stop == cols]
    right = PAD_IN + max(max(deco[ax]["right"] for ax in last_col), 0.05)  # the last tick label's overhang
    width = max(4.8, left + cols * w_panel + (cols - 1) * wspace + right)
    leg = fig.legends[0] if fig.legends else None
    if leg is not None:
        width = max(width, _legend_size(leg)[0] + 2 * PAD_IN)
    w_panel = (width - left - right - (cols - 1) * wspace) / cols
    for ax in axs:
        deco[ax]["title"] = (_wrap(ax.title, w_panel) + 0.06 if ax.get_title() else 0.0) + deco[ax]["offset"]
        ax.title.set_y(1.0 + deco[ax]["offset"] / h_panel)  # above the offset text
    row_of = {ax: ax.get_subplotspec().rowspan.start for ax in axs}
    title_h = [max((deco[ax]["title"] for ax in axs if row_of[ax] == r), default=0.0) for r in range(rows)]
    below_h = [max((deco[ax]["below"] for ax in axs if row_of[ax] == r), default=0.0) for r in range(rows)]
    gap = max((below_h[r] + title_h[r + 1] for r in range(rows - 1)), default=0.0) + 0.1
    sup = fig._suptitle  # matplotlib keeps the figure title's Text here (get_suptitle gives only its string)
    top = PAD_IN + (_wrap(sup, width - 2 * PAD_IN) + 0.08 if sup is not None and sup.get_text() else 0) + title_h[0]
    legend_h = _legend_size(leg)[1] + 0.1 if leg is not None else 0.0
    bottom = PAD_IN + legend_h + below_h[-1]
    height = top + rows * h_panel + (rows - 1) * gap + bottom
    fig.set_size_inches(width, height)
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                        wspace=wspace / w_panel, hspace=gap / h_panel)  # fmt: skip
    if sup is not None:
        sup.set_position((0.5, 1 - PAD_IN / height))
        sup.set_verticalalignment("top")
    if supy:
        fig._supylabel.set_position((PAD_IN / width, (bottom + (height - top)) / 2 / height))
        fig._supylabel.set_horizontalalignment("left")
    if leg is not None:
        leg.set_bbox_to_anchor((0.5, PAD_IN / height), transform=fig.transFigure)
    for ax in axs:  # axis labels at fixed places beside the tick labels (matplotlib measured them each draw)
        d = deco[ax]
        ax.xaxis.set_label_coords(0.5, -(d["ticks_below"] + labelpad) / h_panel)
        ax.yaxis.set_label_coords(-(d["ticks_left"] + labelpad) / w_panel, 0.5)


def _legend_size(leg) -> tuple[float, float]:
    """(width, height) in inches of a figure legend, from its entries and matplotlib's spacing rules."""
    size = RC["legend.fontsize"]
    em = size / 72
    texts = [t.get_text() for t in leg.get_texts()]
    ncols = max(1, leg._ncols)  # matplotlib keeps the column count here only
    nrows = math.ceil(len(texts) / ncols)
    columns = [texts[i * nrows : (i + 1) * nrows] for i in range(ncols)]
    col_w = [max((_text_size(t, size)[0] for t in c), default=0.0) + 2.8 * em for c in columns]
    width = sum(col_w) + 2.0 * em * (ncols - 1) + 0.8 * em
    title = leg.get_title().get_text()
    height = nrows * em * 1.25 + (nrows - 1) * 0.5 * em + (_text_size(title, size)[1] + 0.5 * em if title else 0) + 0.8 * em
    return max(width, _text_size(title, size)[0] + 0.8 * em), height


def _below_is_empty(ax, n, cols) -> bool:
    spec = ax.get_subplotspec()
    below = (spec.rowspan.start + 1) * cols + spec.colspan.start
    return below >= n


def _figure_legend(fig, title=None, order=None):
    """One legend for the figure below the panels: every labelled artist once, strategies first."""
    seen: dict[str, object] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if not seen:
        return None
    labels = list(seen)
    if order:
        labels.sort(key=lambda lab: order.index(lab) if lab in order else len(order))
    n = len(labels)
    leg = fig.legend([seen[lab] for lab in labels], labels, loc="lower center", ncols=min(n, 3 if n > 4 else n),
                     title=title, frameon=False)  # fmt: skip
    leg.set_gid("legend")
    for i, t in enumerate(leg.get_texts()):
        t.set_gid(f"legend-entry-{i}")
    return leg


def _short(col: str, value) -> str:
    names = {"world_size": "p", "strategy": "", "batch_size": "batch", "dataset_size": "n"}
    name = names.get(col, col)
    return f"{name}={value}" if name else str(value)
