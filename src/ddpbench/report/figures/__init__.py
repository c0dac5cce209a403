"""The report's figures (matplotlib, Agg): SVG for the HTML report, PDF for LaTeX.

Figures are small multiples drawn with matplotlib's own subplots: one panel per combination
of the grid's axes that are not on the plot (batch size, dataset size, model, ...), at most
`MAX_SERIES` series per panel, one shared legend per figure below the panels (at most
`MAX_LEGEND` entries), a title on every figure and panel, axis labels with units, and a
layout computed once from the measured lengths of its texts (`place`) so labels never overlap
and each figure is drawn exactly once when saved. Each strategy has one colour and marker in
every figure (`strategy_style`: a fixed map from the sorted strategy registry to tab10; the
baseline is black; names outside the registry get a stable colour from their hash). Plain
matplotlib rather than seaborn or plotly: it is already a dependency (seaborn is not in the
lock), it gives full control of the layout and of the SVG and PDF backends (text kept as
text, deterministic files), and small multiples need nothing more than subplots.

A grid with more than `MAX_PANELS` panels, or more strategies than one legend holds, is
split into several figures: the first keeps the stable name figures/<kind>.svg|pdf, the
next ones are <kind>_2, <kind>_3, ... Each `fig_<kind>` returns a list of (strategy, Figure)
pairs, empty when the grid has no data for it, so a figure is left out rather than drawn
empty. Per-strategy figures are figures/<kind>__<strategy>.svg|pdf (a name with characters
other than ASCII letters, digits, '-' and '_', or a long one, is shortened and gets a hash of
the original, so two strategies never share a file).

Strings from the data (strategy names, axis values, group labels) reach matplotlib only
through `text()`: '$' escaped, so mathtext never parses them, control characters dropped,
long ones shortened. Figures are written atomically (safe_io).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import math
import multiprocessing
import os
import pathlib
import textwrap
import unicodedata
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.cbook  # noqa: E402
import matplotlib.collections  # noqa: E402
import matplotlib.font_manager  # noqa: E402
import matplotlib.text  # noqa: E402
import matplotlib.textpath  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ddpbench import analysis as A  # noqa: E402
from ddpbench.core import safe_io  # noqa: E402

MIN_FONT_PT = 8  # no text smaller than this (the reader checks assert it)
# Deterministic files: no timestamps, fixed ids, text kept as text (smaller, searchable).
RC = {
    "svg.hashsalt": "ddpbench",
    "svg.fonttype": "none",
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 10,
    "figure.labelsize": 9,
    "figure.max_open_warning": 0,  # a split grid opens many figures; make_figures closes each
}
plt.rcParams.update(RC)
METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}
FORMATS = ("svg", "pdf")  # the page's and LaTeX's; a report without a PDF draws only the SVGs
MAX_SERIES = 8  # lines or points per panel
MAX_LEGEND = 10  # entries of a figure's legend
MAX_PANELS = 12  # panels per figure; more are split into <kind>_2, <kind>_3, ...
MAX_PARTS = 2  # figures of one kind (per strategy chunk) in a figure group; further panels are left out, said so
PANEL_W, PANEL_H = 2.7, 2.2  # inches


@dataclass
class Figure:
    kind: str
    strategy: str | None
    title: str
    svg: str  # relative to the output folder
    pdf: str
    group: str = ""  # the figure group's label ("" when the grid has one group)


@dataclass
class Data:
    runs: pd.DataFrame
    cells: pd.DataFrame
    speed: pd.DataFrame
    fits: pd.DataFrame
    steps: pd.DataFrame | None = None
    comm: pd.DataFrame | None = None
    label_axes: list[str] | None = None  # a figure group's data: the whole grid's series axes (fits.csv's labels)
    profile: pd.DataFrame | None = None  # aggregate's profile.csv: top operators of profiled steps

    @property
    def series_axes(self) -> list[str]:
        """Axes that tell apart scaling groups (the grid's axes minus p): strategy and the panels' axes."""
        return self.label_axes if self.label_axes is not None else A.varying(self.runs, A.group_axes(self.runs))

    @property
    def panel_axes(self) -> list[str]:
        """Axes that tell apart panels of a plot against workers: the series axes minus strategy (and
        minus a figure group's own axes, which are constant in it)."""
        return [a for a in self.series_axes if a != "strategy" and a in A.varying(self.runs, [a])]


TITLES = {
    "speedup": "Speedup vs workers",
    "efficiency": "Parallel efficiency vs workers",
    "phases": "Time per step by phase",
    "throughput_vs_batch": "Throughput vs batch size",
    "dataset_size": "Time, speedup and efficiency vs dataset size",
    "loss": "Training loss vs step",
    "step_time": "Step time vs step",
    "memory_vs_batch": "Peak memory vs batch size",
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


LABEL_MAX = 100  # characters of a data-derived label (a legend entry); longer ones end in "…"


def text(value, limit: int = LABEL_MAX) -> str:
    """A string from the data as matplotlib text drawn literally: '$' escaped (no mathtext), control
    characters dropped, at most `limit` characters, and no leading '_' (a legend would hide the entry)."""
    s = "".join(" " if ch in "\t\n\r" else ch for ch in str(value)
                if ch in "\t\n\r" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn"))  # fmt: skip
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("$", r"\$")
    return " " + s if s.startswith("_") else s


# -- one colour per strategy ---------------------------------------------------------------

MARKERS = "osD^vPX*<>p"


@functools.cache  # the strategy modules do not change while a report is drawn (each call scanned the folder)
def _registry() -> list[str]:
    try:
        from ddpbench import strategies

        return sorted(strategies.names())
    except Exception:  # an unpopulated registry must not stop the figures
        return []


def strategy_style(name) -> dict:
    """Colour and marker of a strategy, the same in every figure: the sorted registry (baseline
    excepted) onto tab10 in order, the baseline black, other names a hash-chosen Dark2 colour."""
    name = str(name)
    if name == A.BASELINE_STRATEGY:
        return {"color": "black", "marker": "o"}
    reg = [s for s in _registry() if s != A.BASELINE_STRATEGY]
    if name in reg:
        i = reg.index(name)
        return {"color": plt.get_cmap("tab10")(i % 10), "marker": MARKERS[i % len(MARKERS)]}
    h = int(hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16)
    return {"color": plt.get_cmap("Dark2")(h % 8), "marker": MARKERS[(h // 8) % len(MARKERS)]}


def strategy_order(names) -> list:
    """Registry order first (as coloured), then other names sorted."""
    reg = _registry()
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda s: (0, reg.index(s), "") if s in reg else (1, 0, str(s)))


def strategy_label(name) -> str:
    return text(f"strategy={name}")


def _ordered(n) -> list:
    """n colours for an ordered quantity (world sizes): viridis, never a strategy's colour."""
    cmap = plt.get_cmap("viridis")
    return [cmap(0.85 * i / max(n - 1, 1)) for i in range(n)]


def _chunks(items: list, size: int) -> list[list]:
    """`items` in balanced chunks of at most `size`."""
    if not items:
        return []
    k = math.ceil(len(items) / size)
    per = math.ceil(len(items) / k)
    return [items[i : i + per] for i in range(0, len(items), per)]


# -- small multiples -------------------------------------------------------------------------


def _key_label(cols: list[str], key: tuple) -> str:
    return text(", ".join(_short(c, v) for c, v in zip(cols, key))) if cols else "all runs"


def _panels(df: pd.DataFrame, cols: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """(key, rows) per combination of `cols`, sorted."""
    if not cols:
        return [((), df)]
    out = []
    for key, g in df.groupby(cols, dropna=False, sort=True):
        out.append((key if isinstance(key, tuple) else (key,), g))
    return out


def _thin(df: pd.DataFrame, cols: list[str], limit: int = MAX_PANELS) -> tuple[pd.DataFrame, str]:
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


def _grid(title: str, panels: list, draw, *, xlabel: str | None, ylabel: str | None, ncols: int | None = None,
          sharex=False, sharey=False, panel_size=(PANEL_W, PANEL_H), legend_title: str | None = None,
          legend_order=None, omitted: str = ""):  # fmt: skip
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
    """Sizes `fig` (made by _grid) around its panels and positions panels, titles, the y label and
    the legend so that no text overlaps another or leaves the figure; call again after a title changes.
    The tick labels (how many, how long) depend on the panels' size: _grid makes the panels about
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
        deco[ax] = dict(left=ticks_left + ylabel_w, below=ticks_below + xlabel_h, right=xw / 2, title=0.0,
                        ticks_left=ticks_left, ticks_below=ticks_below)  # fmt: skip
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
        deco[ax]["title"] = _wrap(ax.title, w_panel) + 0.06 if ax.get_title() else 0.0
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


def _series(ax, x, y, yerr=None, *, color, marker, ls="-", lw=1.2, ms=5, mfc=None, label=None):
    """A series as one line with its markers, and its intervals (yerr: 2 x n, below and above; NaN: none)
    as one collection of whiskers: what errorbar drew, without caps, in two artists instead of four
    (errorbar was a quarter of building the figures at 8,100 runs)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if yerr is not None:
        lo, hi = y - np.asarray(yerr[0], float), y + np.asarray(yerr[1], float)
        ok = np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ends = np.stack([np.column_stack([x[ok], lo[ok]]), np.column_stack([x[ok], hi[ok]])], axis=1)
            _add(ax, matplotlib.collections.LineCollection(ends, colors=color, linewidths=lw), ends)
    (line,) = ax.plot(x, y, ls=ls, lw=lw, color=color, marker=marker, ms=ms, mfc=mfc, label=label)  # rescales the view
    return line


def _add(ax, collection, points: np.ndarray) -> None:
    """Adds a collection and its points to the data limits without rescaling the view now (matplotlib's
    add_collection did, each time: a tenth of building the figures); the caller's next plot, or
    autoscale_view, rescales once."""
    ax.add_collection(collection, autolim=False)
    ax.update_datalim(points.reshape(-1, 2))


def _yerr(df, col, lo=None, hi=None):
    lo = df[lo or f"{col}_ci_low"] if (lo or f"{col}_ci_low") in df else df[col] * np.nan
    hi = df[hi or f"{col}_ci_high"] if (hi or f"{col}_ci_high") in df else df[col] * np.nan
    # Cells without an interval get no bar (NaN), never a zero-width fake one.
    return np.vstack([df[col] - lo, hi - df[col]])


def level_note(df: pd.DataFrame, col: str) -> str:
    """'bars: 95% interval' from the interval levels recorded next to `col` (several levels: their range)."""
    levels = pd.to_numeric(df.get(f"{col}_ci_level", pd.Series(dtype=float)), errors="coerce").dropna()
    if levels.empty:
        return "no intervals"
    lo, hi = 100 * levels.min(), 100 * levels.max()
    return f"bars: {lo:.3g}% interval" if lo == hi else f"bars: {lo:.3g}–{hi:.3g}% intervals"


def _workers_axis(ax, ps):
    ax.set_xscale("log", base=2)
    ticks = sorted({int(p) for p in ps})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()


# -- against workers: speedup, efficiency, Karp-Flatt, rank skew -----------------------------

DODGE = 0.07  # log2 units between neighbouring strategies at one p


def _tag(d: Data, df: pd.DataFrame) -> pd.DataFrame:
    """`df` (rows of speed/cells) with its scaling group's label, strategy and panel key."""
    df = df.copy()
    cols = d.series_axes
    df["_group"] = [A.label(r, cols) for r in df[cols].to_dict("records")] if len(df) else []
    df["_strategy"] = df["strategy"].astype(str) if "strategy" in df else "all runs"
    return df


def _vs_workers(d: Data, kind: str, df: pd.DataFrame, ycol: str, ylabel: str, note: str, *, ideal=None,
                fits=False, logy=False, ymin0=False, lo=None, hi=None, absolute=False):  # fmt: skip
    """Panels per combination of the panel axes, strategies as coloured series, p on x.
    With one world size beyond 1, strategies are dodged side by side (points with whiskers) at it,
    unless the metric is `absolute` (a time, not a ratio to p = 1): then p = 1 is drawn too."""
    df = df[df[ycol].notna()]
    if df.empty:
        return []
    pcols = [c for c in d.panel_axes if c in df]
    ps = sorted({int(p) for p in df["world_size"]})
    categorical = len([p for p in ps if p > 1]) <= 1 and not absolute
    if categorical:  # one world size beyond the baseline: only it is drawn (S(1) = 1 by definition)
        df = df[df["world_size"] == max(ps)]
    preds = d.fits[(d.fits["kind"] == "prediction") & d.fits["law"].isin(["amdahl", "gustafson"])] if fits and not d.fits.empty else None
    all_p = sorted({*ps, *(int(p) for p in preds["p"])}) if preds is not None and not preds.empty and not categorical else ps
    strategies = strategy_order(df["_strategy"].unique())
    fit_of = _fits_by_group(d.fits) if fits and not categorical else {}
    refs = []
    if ideal:
        refs.append(ideal)
    if fits and not categorical and not d.fits.empty and _fit_rows(d.fits, None).shape[0]:
        refs += ["fit (Amdahl / Gustafson)", "prediction (fit, 2× and 4× max p)"]
    out = []
    for chunk in _chunks(strategies, min(MAX_SERIES, MAX_LEGEND - len(refs))):
        sub, omitted = _thin(df[df["_strategy"].isin(chunk)], pcols)
        panels = [(_key_label(pcols, key), g) for key, g in _panels(sub, pcols)]

        def draw(ax, g, chunk=chunk):
            by = dict(tuple(g.groupby("_strategy", sort=False)))
            for i, s in enumerate(chunk):
                rows = by.get(s)
                if rows is None:
                    continue
                st = strategy_style(s)
                for grp, r in rows.groupby("_group", sort=True):
                    r = r.sort_values("world_size")
                    off = (i - (len(chunk) - 1) / 2) * DODGE
                    x = (np.full(len(r), float(i)) if categorical else r["world_size"].to_numpy(float) * 2**off)
                    _series(ax, x, r[ycol], _yerr(r, ycol, lo, hi), color=st["color"], marker=st["marker"],
                            ls="none" if categorical else "-", label=strategy_label(s))  # fmt: skip
                    if grp in fit_of:
                        _draw_fit(ax, fit_of[grp], r, all_p, st["color"], off)
            if categorical:
                p = max(ps)
                ax.set_xticks(range(len(chunk)), [text(s, 14) for s in chunk], rotation=90)
                ax.set_xlim(-0.7, len(chunk) - 0.3)
                ax.grid(False, axis="x")
                if ideal:
                    y = p if kind == "speedup" else 1.0
                    ax.axhline(y, ls=":", color="gray", label=ideal)
            else:
                _workers_axis(ax, all_p)
                ax.set_xlim(0.8, max(all_p) * 1.25)
                if ideal:
                    q = np.array(all_p, float)
                    ax.plot(q, q if kind == "speedup" else np.ones_like(q), ":", color="gray", label=ideal)
                if fits and len(refs) > 1:
                    ax.plot([], [], "--", color="gray", lw=1, label=refs[1])
                    ax.plot([], [], "o", mfc="none", color="gray", label=refs[2])
            if logy:
                ax.set_yscale("log", base=2)
                ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            if ymin0:
                ax.set_ylim(bottom=0)

        at = f" at p = {max(ps)}" if categorical else ""
        xlabel = "strategy (colour: see legend)" if categorical else "workers p (log scale)"
        order = [strategy_label(s) for s in chunk] + refs
        out += _grid(f"{TITLES[kind]}{at} ({note})", panels, draw, xlabel=xlabel, ylabel=ylabel,
                     sharey=True, legend_order=order, omitted=omitted)  # fmt: skip
    return out


def _fit_rows(fits: pd.DataFrame, name: str | None) -> pd.DataFrame:
    if fits.empty:
        return fits
    # Series labels and fits.csv group labels are both analysis.label over the same axes.
    ok = fits["law"].isin(["amdahl", "gustafson"]) & fits["estimate"].notna()
    return fits[ok] if name is None else fits[(fits["group"] == name) & ok]


def _fits_by_group(fits: pd.DataFrame) -> dict[str, tuple]:
    """Per scaling group with an Amdahl or Gustafson fit: (law, {parameter: estimate}, its predictions),
    read once per figure rather than filtered from the whole fits table for every series."""
    rows = _fit_rows(fits, None)
    out = {}
    if rows.empty:
        return out
    for name, fit in rows.groupby("group", sort=False):
        pred = fit[fit["kind"] == "prediction"]
        out[name] = (fit["law"].iloc[0], dict(zip(fit["parameter"], fit["estimate"])), pred)
    return out


def _draw_fit(ax, fit: tuple, g, all_p, color, off):
    law, par, pr = fit
    q = np.geomspace(1, max(all_p), 50)
    ax.plot(q, _fitted_speedup(par, law, q, g), "--", color=color, lw=1)
    if not pr.empty:
        _series(ax, pr["p"] * 2**off, pr["estimate"], np.vstack([pr["estimate"] - pr["ci_low"], pr["ci_high"] - pr["estimate"]]),
                color=color, marker="o", ls="none", mfc="none", lw=1.0)  # fmt: skip


def _fitted_speedup(par: dict, law, q, g):
    if law == "gustafson":
        return A.gustafson_speedup(q, par["alpha"])
    return g["baseline_time_s"].median() / A.amdahl_time(q, par["t1_s"], par["f"])


def _scaling(d: Data) -> pd.DataFrame:
    """Speedup rows of scaling groups measured at some p > 1 (p = 1 alone is the baseline)."""
    sp = d.speed
    if sp.empty:
        return sp
    sp = _tag(d, sp)
    has_p = sp.groupby("_group")["world_size"].transform("max") > 1
    return sp[has_p]


def fig_speedup(d: Data):
    sp = _scaling(d)
    if sp.empty:
        return []
    ylabel = "speedup S(p) = T(1)/T(p)" if (sp["measure"] == "speedup").all() else "(scaled) speedup S(p)"
    return _vs_workers(d, "speedup", sp, "speedup", ylabel, level_note(sp, "speedup"), ideal="ideal S = p",
                       fits=True, logy=sp["world_size"].nunique() > 2)  # fmt: skip


def fig_efficiency(d: Data):
    sp = _scaling(d)
    if sp.empty:
        return []
    return _vs_workers(d, "efficiency", sp, "efficiency", "efficiency E(p) = S(p)/p", level_note(sp, "speedup"),
                       ideal="ideal E = 1", ymin0=True)  # fmt: skip


def fig_karp_flatt(d: Data):
    kf = d.fits[(d.fits["law"] == "karp_flatt") & d.fits["estimate"].notna()] if not d.fits.empty else d.fits
    if kf.empty:
        return []
    # Each fits.csv group back to its strategy and panel through the speedup rows it was fitted on.
    sp = _tag(d, d.speed) if not d.speed.empty else pd.DataFrame(columns=["_group", "_strategy"])
    keys = sp.drop_duplicates("_group").set_index("_group")
    cols = ["_strategy", *[c for c in d.panel_axes if c in keys]]
    rows = []
    for _, r in kf.iterrows():
        k = keys.loc[r["group"]] if r["group"] in keys.index else None
        extra = {c: (k[c] if k is not None else r["group"]) for c in cols}
        rows.append(dict(r, **extra, _group=r["group"], world_size=r["p"]))
    df = pd.DataFrame(rows)
    return _vs_workers(d, "karp_flatt", df, "estimate", "serial fraction e(p) = (1/S − 1/p)/(1 − 1/p)",
                       "rising: overhead grows with p", lo="ci_low", hi="ci_high")  # fmt: skip


def fig_rank_skew(d: Data):
    c = d.cells
    if "rank_skew" not in c:
        return []
    c = c[(c["world_size"] > 1) & c["rank_skew"].notna()]
    if c.empty:
        return []
    c = _tag(d, c)
    return _vs_workers(d, "rank_skew", c, "rank_skew", "rank skew: (max − min)/max step time",
                       f"median; {level_note(c, 'rank_skew')}", ymin0=True)  # fmt: skip


# -- phases -------------------------------------------------------------------------------

PHASES = [("phase_data_s", "data"), ("phase_forward_s", "forward"), ("phase_backward_s", "backward"),
          ("phase_optimizer_s", "optimizer"), ("phase_exposed_comm_s", "exposed comm")]  # fmt: skip
# Step time outside the pacing rank's named phases: drawn when runs carry it (older runs do not).
OTHER_PHASE = ("phase_other_s", "other")
PHASE_COLORS = ["#8c8c8c", "#4c72b0", "#55a868", "#ccb974", "#c44e52", "#dd8452"]  # data ... other


def _hbars(ax, pos, width, left, height=0.7, **style):
    """Horizontal bars as one collection (barh made a patch per bar, each updating the limits)."""
    y0, y1 = np.asarray(pos, float) - height / 2, np.asarray(pos, float) + height / 2
    x0, x1 = np.asarray(left, float), np.asarray(left, float) + np.asarray(width, float)
    boxes = np.stack([np.column_stack(c) for c in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))], axis=1)
    _add(ax, matplotlib.collections.PolyCollection(boxes, linewidths=0.8 if "hatch" in style else 0, **style), boxes)


def _stacked_bars(ax, g: pd.DataFrame, segments, colors) -> np.ndarray:
    """One horizontal bar per row of `g` (a strategy), `segments` (column, name) stacked left to right;
    the strategy names as tick labels in their colours. Returns the bars' right ends."""
    pos = np.arange(len(g))  # positions, not categories: two rows whose shortened labels agree stay apart
    left = np.zeros(len(g))
    for (col, name), color in zip(segments, colors):
        v = g[col].fillna(0).to_numpy()
        _hbars(ax, pos, v, left, label=name, facecolor=color)
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
    chunks = max(len(_chunks(strategy_order(g["strategy"]), MAX_SERIES)) for _, g in _panels(med, pcols))
    med, omitted = _thin(med, pcols, max(1, MAX_PANELS // chunks))
    panels = []
    for key, g in _panels(med, pcols):
        order = strategy_order(g["strategy"])
        for part in _chunks(order, MAX_SERIES):
            rows = g.set_index("strategy").loc[part].reset_index()
            panels.append((_key_label(pcols, key), rows))
    hidden_any = ((med["phase_comm_s"] - med["phase_exposed_comm_s"]).clip(lower=0).fillna(0) > 0).any()

    def draw(ax, g):
        left = _stacked_bars(ax, g, phases, PHASE_COLORS)
        hidden = (g["phase_comm_s"] - g["phase_exposed_comm_s"]).clip(lower=0).fillna(0).to_numpy()
        if hidden_any:
            _hbars(ax, np.arange(len(g)), hidden, left, label="overlapped comm (hidden)", facecolor="none",
                   edgecolor="gray", hatch="///")  # fmt: skip
            ax.autoscale_view(scaley=False)

    n_rows = max(len(g) for _, g in panels)
    return _grid(f"{TITLES['phases']} (median over repeats; pacing rank)", panels, draw,
                 xlabel="seconds per timed step", ylabel="strategy (label colour: as in every figure)", sharex=True,
                 panel_size=(3.0, 0.45 + 0.3 * n_rows), ncols=None if len(panels) > 2 else len(panels),
                 omitted=omitted)  # fmt: skip


# Where a run's wall time goes, launch to exit (summary.json timeline): the spans of
# metrics.TIMELINE_SPANS, a few merged so the legend stays short; the timed steps stand out.
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
        for part in _chunks(order, MAX_SERIES):
            panels.append((f"p={int(p)}", g.set_index("strategy").loc[part].reset_index()))
    segments = [(label, label) for _, label, _ in RUN_SPANS]
    colors = [c for *_, c in RUN_SPANS]
    n_rows = max(len(g) for _, g in panels)
    return _grid("Where a run's wall time goes, launch to exit (median per run)", panels,
                 lambda ax, g: _stacked_bars(ax, g, segments, colors), xlabel="seconds per run",
                 ylabel="strategy (label colour: as in every figure)", sharex=True,
                 panel_size=(3.0, 0.45 + 0.3 * n_rows), ncols=None if len(panels) > 2 else len(panels))  # fmt: skip


# -- against batch size or dataset size -----------------------------------------------------


def _numeric(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


AXIS_LABELS = {
    "batch_size": "batch size [samples] (global: strong scaling; per rank: weak)",
    "dataset_size": "dataset size [training samples]",
}


def _vs_axis(d: Data, kind: str, axis: str, metrics: list[tuple[str, str]], logx=True):
    """Cells' medians of `metrics` against a numeric axis: strategies as series, one panel per metric and
    combination of the other axes (world size included)."""
    c = d.cells
    if axis not in c or _numeric(c[axis]).nunique() < 2:
        return []
    auto = _auto_batch_cells(d, c) if axis == "batch_size" else c.iloc[0:0]
    c = pd.concat([c.assign(**{axis: _numeric(c[axis])}).dropna(subset=[axis]).assign(_auto=False), auto])
    metrics = [(m, y) for m, y in metrics if m in c and c[m].notna().any()]
    if not metrics:
        return []
    c = c.assign(_strategy=c["strategy"].astype(str))
    pcols = [a for a in A.varying(d.runs, A.axes(d.runs)) if a not in (axis, "strategy") and a in c]
    strategies = strategy_order(c["_strategy"].unique())
    out = []
    for chunk in _chunks(strategies, MAX_SERIES):
        sub, omitted = _thin(c[c["_strategy"].isin(chunk)], pcols, MAX_PANELS // len(metrics))
        panels = []
        for key, g in _panels(sub, pcols):
            for m, ylabel in metrics:
                if g[m].notna().any():
                    where = _key_label(pcols, key)
                    panels.append((f"{ylabel}\n{where}" if len(metrics) > 1 else where, (g, m, ylabel)))

        def draw(ax, payload, chunk=chunk):
            g, m, ylabel = payload
            fixed, chosen = g[~g["_auto"].astype(bool)], g[g["_auto"].astype(bool)]
            _strategy_series(ax, fixed, chunk, fixed["_strategy"], axis, m)
            for s, r in chosen.dropna(subset=[m]).groupby("_strategy", sort=False):
                ax.plot(r[axis], r[m], ls="none", marker="*", ms=11, color=strategy_style(s)["color"], mec="black",
                        mew=0.5, label=AUTO_LABEL)  # fmt: skip
            if logx:
                ax.set_xscale("log", base=2)
                ticks = sorted(g[axis].unique())
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
                ax.minorticks_off()
            if len(metrics) > 1:
                ax.set_ylabel(ylabel)

        notes = "; ".join(dict.fromkeys(level_note(c, m) for m, _ in metrics))
        out += _grid(f"{TITLES[kind]} ({notes})", panels, draw, xlabel=AXIS_LABELS.get(axis, axis.replace("_", " ")),
                     ylabel=metrics[0][1] if len(metrics) == 1 else None,
                     ncols=len(metrics) if len(metrics) > 1 else None,
                     legend_order=[strategy_label(s) for s in chunk] + [AUTO_LABEL], omitted=omitted)  # fmt: skip
    return out


AUTO_LABEL = "batch_size auto, at the batch it chose (star)"


def _auto_batch_cells(d: Data, cells: pd.DataFrame) -> pd.DataFrame:
    """The cells of batch_size auto, placed at the per-rank batch they chose (analysis.auto_batch)."""
    auto = cells[cells["batch_size"].astype(str) == "auto"]
    if auto.empty:
        return auto.assign(_auto=True)
    cols = [a for a in A.axes(d.runs) if a in auto]
    chosen = A.auto_batch(d.runs, cols)
    key = lambda df: pd.Series([tuple(map(str, r)) for r in df[cols].itertuples(index=False)], index=df.index)  # noqa: E731
    by = dict(zip(key(chosen), chosen["chosen"]))
    return auto.assign(batch_size=key(auto).map(by).astype(float), _auto=True).dropna(subset=["batch_size"])


def _strategy_series(ax, g: pd.DataFrame, chunk: list, strategies: pd.Series, x: str, m: str) -> None:
    """One line per strategy of `chunk`: `m` against the numeric column `x` (log scale, neighbours
    dodged apart), with its interval where the frame has one."""
    by = dict(tuple(g.dropna(subset=[m, x]).groupby(strategies, sort=False)))
    for i, s in enumerate(chunk):
        r = by.get(s)
        if r is None:
            continue
        r = r.sort_values(x)
        st = strategy_style(s)
        off = (i - (len(chunk) - 1) / 2) * DODGE
        yerr = _yerr(r, m) if f"{m}_ci_low" in r else None
        _series(ax, r[x] * 2**off, r[m], yerr, marker=st["marker"], color=st["color"], label=strategy_label(s))


def fig_throughput_vs_batch(d: Data):
    return _vs_axis(d, "throughput_vs_batch", "batch_size", [("samples_per_s", "throughput [samples/s]")])


def fig_memory_vs_batch(d: Data):
    return _vs_axis(d, "memory_vs_batch", "batch_size",
                    [("peak_rss_mb", "peak RSS [MB] (max over ranks)"), ("cuda_max_allocated_mb", "peak CUDA allocated [MB]")])  # fmt: skip


def fig_dataset_size(d: Data):
    c = d.cells
    if "dataset_size" not in c or _numeric(c["dataset_size"]).nunique() < 2:
        return []
    sp = d.speed
    cols = [*A.axes(d.runs), "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_ci_level", "efficiency",
            "efficiency_ci_low", "efficiency_ci_high"]  # fmt: skip
    # Efficiency is the speedup over p: its interval has the speedup's level.
    sp = sp.assign(efficiency_ci_level=sp["speedup_ci_level"]) if "speedup_ci_level" in sp else sp
    cells = c.merge(sp[[k for k in [*cols, "efficiency_ci_level"] if k in sp]], how="left", on=A.axes(d.runs)) if not sp.empty else c
    return _vs_axis(Data(d.runs, cells, sp, d.fits), "dataset_size", "dataset_size",
                    [("epoch_time_s", "epoch time [s]"), ("speedup", "speedup S(p)"), ("efficiency", "efficiency E(p)")])  # fmt: skip


# -- per step, one figure per strategy -------------------------------------------------------


def _per_strategy_steps(d: Data, kind: str, ycol: str, reduce: str, ylabel: str):
    st = d.steps
    if st is None or st.empty or ycol not in st:
        return []
    out = []
    # One run per cell (the lowest repeat) keeps the lines readable; all repeats are in steps.csv.
    cell = [c for c in ("strategy", "world_size", "batch_size", "scaling", "model", "dataset", "dataset_size", "device") if c in st]
    runs = st.drop_duplicates("run_dir").assign(_r=lambda df: df["repeat"].fillna(0) if "repeat" in df else 0)
    keep = runs.sort_values(["_r", "run_dir"]).drop_duplicates(cell)["run_dir"]
    first = st[st["run_dir"].isin(keep)]
    reference = first[first["strategy"] == A.BASELINE_STRATEGY] if ycol == "loss" else first.iloc[:0]
    ref_label = text(f"{A.BASELINE_STRATEGY} (reference)")
    pcols = [c for c in cell if c not in ("strategy", "world_size") and first[c].astype(str).nunique() > 1]
    for strategy, s in first.groupby("strategy", sort=True):
        if s[ycol].notna().sum() == 0:
            continue
        meta = s.drop_duplicates("run_dir").set_index("run_dir")
        per_step = s.groupby(["run_dir", "step"], sort=True).agg(y=(ycol, reduce), timed=("timed", "min")).reset_index()
        ps = sorted(meta["world_size"].unique())
        colors = dict(zip(ps, _ordered(len(ps))))
        panels = []
        for key, g in _panels(meta.reset_index(), pcols):
            run_ids = list(g.sort_values(["world_size", "run_dir"])["run_dir"])
            for part in _chunks(run_ids, MAX_SERIES - 1):
                panels.append((_key_label(pcols, key), (part, key)))
        show_ref = strategy != A.BASELINE_STRATEGY and not reference.empty

        def draw(ax, payload, s=s, meta=meta, per_step=per_step, colors=colors, show_ref=show_ref):
            part, key = payload
            if show_ref:
                ref = reference
                for c, v in zip(pcols, key):
                    ref = ref[ref[c].astype(str) == str(v)]
                ref = ref.groupby(["run_dir", "step"], sort=True)[ycol].mean().reset_index()
                for _, g in ref.groupby("run_dir"):
                    # The single-worker curve: exact strategies should follow it, approximate ones may drift.
                    ax.plot(g["step"], g[ycol], "--", color="gray", lw=1, label=ref_label)
            for run in part:
                g = per_step[per_step["run_dir"] == run]
                p = meta.loc[run, "world_size"]
                ax.plot(g["step"], g["y"], color=colors[p], lw=1.2, label=f"p={p}")
                untimed = g[g["timed"] == 0]
                ax.plot(untimed["step"], untimed["y"], "x", color=colors[p], ms=4)
            ax.plot([], [], "x", color="gray", ms=4, label="warm-up step (not timed)")

        order = [f"p={p}" for p in ps] + [ref_label, "warm-up step (not timed)"]
        for fig in _grid(f"{TITLES[kind]}: {text(strategy)}", panels, draw, xlabel="step", ylabel=ylabel,
                         legend_order=order):  # fmt: skip
            out.append((str(strategy), fig))
    return out


def fig_loss(d: Data):
    return _per_strategy_steps(d, "loss", "loss", "mean", "training loss (mean over ranks)")


def fig_step_time(d: Data):
    return _per_strategy_steps(d, "step_time", "total_s", "max", "step time [s] (slowest rank)")


# -- the accelerators study's figures: per epoch, per strategy, against workers ----------------------

P_STYLES = ("-", "--", ":", "-.")  # line style by world size where strategies share a panel


def fig_epoch_throughput(d: Data):
    """Throughput of each epoch (global samples over the steps' pacing time, steps.csv), one line per
    strategy and world size, one panel per combination of the panel axes: how throughput settles after
    the first epoch (its warm-up steps, hollow) and what each device reaches."""
    if d.steps is None or d.steps.empty:
        return []
    pcols = list(d.panel_axes)
    t = A.epoch_throughput(d.runs, d.steps, ["strategy", "world_size", *pcols])
    if t.empty or t["epoch"].nunique() < 2:
        return []
    t = t.assign(_strategy=t["strategy"].astype(str), _p=pd.to_numeric(t["world_size"], errors="coerce"))
    ps = sorted(t["_p"].dropna().unique())
    series = [(s, p) for s in strategy_order(t["_strategy"].unique()) for p in ps
              if ((t["_strategy"] == s) & (t["_p"] == p)).any()]  # fmt: skip
    name = lambda s, p: f"{text(s)}, p={int(p)}"  # noqa: E731
    warm = "epoch with warm-up steps (hollow)"
    out = []
    for chunk in _chunks(series, min(MAX_SERIES, MAX_LEGEND - 1)):
        keep = pd.Series(list(zip(t["_strategy"], t["_p"])), index=t.index).isin(chunk)
        sub, omitted = _thin(t[keep], pcols)

        def draw(ax, g, chunk=chunk):
            for s, p in chunk:
                r = g[(g["_strategy"] == s) & (g["_p"] == p)].sort_values("epoch")
                if r.empty:
                    continue
                st = strategy_style(s)
                x = r["epoch"].to_numpy(float) + 1
                _series(ax, x, r["samples_per_s"], color=st["color"], marker=st["marker"], ls=P_STYLES[ps.index(p) % len(P_STYLES)],
                        label=name(s, p))  # fmt: skip
                w = r["warmup"].to_numpy(bool)
                ax.plot(x[w], r["samples_per_s"].to_numpy(float)[w], ls="none", marker=st["marker"], ms=7, mfc="white",
                        color=st["color"])  # fmt: skip
            ax.plot([], [], ls="none", marker="o", ms=7, mfc="white", color="gray", label=warm)
            epochs = sorted(g["epoch"].unique())
            ax.set_xticks([e + 1 for e in epochs], [str(int(e) + 1) for e in epochs])
            ax.set_ylim(bottom=0)

        panels = [(_key_label(pcols, key), g) for key, g in _panels(sub, pcols)]
        out += _grid("Throughput per epoch (median over repeats; pacing rank's steps, warm-up included)", panels, draw,
                     xlabel="epoch", ylabel="throughput [samples/s]", sharey=True,
                     legend_order=[name(*c) for c in chunk] + [warm], omitted=omitted)  # fmt: skip
    return out


STRATEGY_METRICS = [("round_ms", "time per round [ms]"), ("samples_per_s", "throughput [samples/s]"),
                    ("test_acc_pct", "test accuracy [%]")]  # fmt: skip


def fig_strategy_bars(d: Data):
    """Per combination of the panel axes that compares two strategies or more: time per round (local
    SGD's round: its local steps and the averaging; one step for the others), throughput and test
    accuracy, one bar per strategy and world size, with their intervals where cells.csv has them."""
    c = d.cells
    if c.empty or "samples_per_s" not in c:
        return []
    pcols = [a for a in d.panel_axes if a in c]
    cols = ["strategy", "world_size", *pcols]
    c = c[c["samples_per_s"].notna()].merge(A.round_time(d.runs, cols), on=cols, how="left")
    scale = {"round_ms": ("round_s", 1e3), "test_acc_pct": ("test_acc", 100.0)}
    for m, (src, k) in scale.items():
        for suffix in ("", "_ci_low", "_ci_high"):
            c[m + suffix] = pd.to_numeric(c[src + suffix], errors="coerce") * k if src + suffix in c else np.nan
    c = c.assign(_strategy=c["strategy"].astype(str), _p=pd.to_numeric(c["world_size"], errors="coerce"))
    several = c.groupby(pcols, dropna=False)["_strategy"].transform("nunique") > 1 if pcols else c["_strategy"].nunique() > 1
    c = c[several] if pcols else (c if several else c.iloc[0:0])
    if c.empty:
        return []
    metrics = [(m, y) for m, y in STRATEGY_METRICS if c[m].notna().any()]

    def draw(ax, payload):
        g, m = payload
        ax.set_xlabel(dict(STRATEGY_METRICS)[m])
        pos = np.arange(len(g))
        for i, (s, val) in enumerate(zip(g["_strategy"], g[m].to_numpy(float))):
            if np.isfinite(val):
                _hbars(ax, [i], [val], [0.0], facecolor=strategy_style(s)["color"], label=strategy_label(s))
        lo, hi = g[f"{m}_ci_low"].to_numpy(float), g[f"{m}_ci_high"].to_numpy(float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ends = np.stack([np.column_stack([lo[ok], pos[ok]]), np.column_stack([hi[ok], pos[ok]])], axis=1)
            _add(ax, matplotlib.collections.LineCollection(ends, colors="black", linewidths=1.2), ends)
        ax.autoscale_view()
        ax.set_xlim(left=0)
        ax.set_yticks(pos, [text(f"{s}, p={int(p)}", 18) for s, p in zip(g["_strategy"], g["_p"])])
        for tick, s in zip(ax.get_yticklabels(), g["_strategy"]):
            tick.set_color(strategy_style(s)["color"])
        ax.set_ylim(len(g) - 0.5, -0.5)
        ax.grid(False, axis="y")

    out = []
    for chunk in _chunks(strategy_order(c["_strategy"].unique()), MAX_SERIES):
        sub, omitted = _thin(c[c["_strategy"].isin(chunk)], pcols, max(1, MAX_PANELS // len(metrics)))
        panels = []
        for key, g in _panels(sub, pcols):
            g = g.assign(_o=g["_strategy"].map({s: i for i, s in enumerate(chunk)})).sort_values(["_o", "_p"])
            where = _key_label(pcols, key)
            panels += [(where or ylabel, (g, m)) for m, ylabel in metrics]
        n_rows = max(len(g) for _, (g, _) in panels)
        out += _grid("Time per round, throughput and accuracy per strategy (geometric means, accuracy: medians; bars: "
                     "intervals)", panels, draw, xlabel=None, ylabel="strategy, world size p", ncols=len(metrics),
                     panel_size=(2.6, 0.45 + 0.3 * n_rows), legend_order=[strategy_label(s) for s in chunk],
                     omitted=omitted)  # fmt: skip
    return out


def _cells_vs_workers(d: Data, kind: str, col: str, ylabel: str, **style):
    c = d.cells
    if col not in c or c["world_size"].nunique() < 2:
        return []
    c = c[c[col].notna()]
    pcols = [a for a in d.panel_axes if a in c]
    if pcols:  # only panels that span world sizes (a batch size only one process ran says nothing here)
        c = c[c.groupby(pcols, dropna=False)["world_size"].transform("nunique") > 1]
    if c.empty:
        return []
    c = _tag(d, c)
    return _vs_workers(d, kind, c, col, ylabel, level_note(c, col), absolute=True, **style)


def fig_throughput(d: Data):
    return _cells_vs_workers(d, "throughput", "samples_per_s", "throughput [samples/s]", ymin0=True)


def fig_epoch_time(d: Data):
    return _cells_vs_workers(d, "epoch_time", "epoch_time_s", "epoch time [s]", ymin0=True)


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
    table, omitted = _thin(table, cols)
    panels = []
    order = {s: i for i, s in enumerate(strategy_order(table["strategy"].astype(str).unique()))} if "strategy" in table else {}
    for key, g in sorted(_panels(table, cols), key=lambda kg: (order.get(str(dict(zip(cols, kg[0])).get("strategy")), 0), kg[0])):
        named = g[g["op"] != "other"].sort_values("self_s", ascending=False)
        top = named.head(PROFILE_TOP)
        rest = g["self_s"].sum() - top["self_s"].sum()
        bars = pd.DataFrame({"op": [text(o, 28) for o in top["op"]] + ["other operators, rest of step"],
                             "ms": [*(1e3 * top["self_s"]), 1e3 * rest],
                             "kind": ["communication" if c else "compute" for c in top["comm"]] + ["rest"]})  # fmt: skip
        act = g["activity"].iloc[0]
        panels.append((_key_label(cols, key) + ("" if act == "cpu" else f" ({act})"), bars))

    def draw(ax, bars):
        pos = np.arange(len(bars))
        for kind, color in PROFILE_COLORS.items():
            sel = (bars["kind"] == kind).to_numpy()
            if sel.any():
                label = {"communication": "communication operator", "compute": "compute operator",
                         "rest": "other operators and time outside any (rest of the step)"}[kind]  # fmt: skip
                _hbars(ax, pos[sel], bars["ms"].to_numpy()[sel], np.zeros(sel.sum()), label=label, facecolor=color)
        ax.autoscale_view()
        ax.set_yticks(pos, list(bars["op"]))
        ax.set_ylim(len(bars) - 0.5, -0.5)
        ax.set_xlim(left=0)
        ax.grid(False, axis="y")

    rows = max((len(b) for _, b in panels), default=1)
    return _grid(f"{TITLES['profile']} (torch.profiler self time; mean over ranks, median over repeats)", panels,
                 draw, xlabel="milliseconds per profiled step", ylabel="operator (the top ones by self time)",
                 panel_size=(3.2, 0.45 + 0.28 * rows),
                 ncols=None if len(panels) > 2 else len(panels), omitted=omitted)  # fmt: skip


# -- against the link's measured bandwidth -------------------------------------------------------


def bandwidth_text(gbps: float) -> str:
    """A bandwidth in Gbit/s as a tick label: '10 Gbit/s', '100 Mbit/s', '500 kbit/s' (the shortest form;
    findings.bandwidth_text keeps 3 significant digits for sentences)."""
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
    col = lambda c: _numeric(on_link[c]) if c in on_link else pd.Series(np.nan, index=on_link.index)  # noqa: E731
    per_step = on_link.assign(_x=col(A.ACHIEVED) / 1e9, _comm=col("phase_comm_s") / col("timed_steps"),
                              _exposed=col("phase_exposed_comm_s") / col("timed_steps"))  # fmt: skip
    # Per cell: medians over its runs (comm per step), as cells.csv has the throughput's geometric mean.
    runs_med = per_step.groupby(cols, dropna=False, sort=True)[["_x", "_comm", "_exposed"]].median().reset_index()
    c = d.cells
    x = _numeric(c["link_gbps"]) if "link_gbps" in c else pd.Series(np.nan, index=c.index)
    on = (x > 0) & (_numeric(c["nodes"]) > 1 if "nodes" in c else True)
    cells = c[on].assign(_x=x[on])
    base = d.cells[(d.cells["strategy"].astype(str) == A.BASELINE_STRATEGY) & (_numeric(d.cells["world_size"]) == 1)]
    pcols = A.link_group_axes(on_link)
    metrics = [("samples_per_s", "throughput [samples/s]"), ("_comm", "communication per step [s]"),
               ("_exposed", "exposed communication per step [s]")]  # fmt: skip
    strategies = strategy_order(runs_med["strategy"].astype(str).unique())
    out = []
    for chunk in _chunks(strategies, MAX_SERIES):
        panels = []
        for key, g in _panels(runs_med[runs_med["strategy"].astype(str).isin(chunk)], pcols):
            info = dict(zip(pcols, key))
            where = _key_label(pcols, key)
            sel = A.matching(cells, info)
            # The single process at these settings: world size and what cannot matter to it aside.
            ref = A.matching(base, {k: v for k, v in info.items() if k not in (*A.LAUNCH_AXES, *A.IRRELEVANT_AT_BASELINE)})
            for m, ylabel in metrics:
                frame = sel if m == "samples_per_s" else g
                if len(frame) and m in frame and frame[m].notna().any():
                    panels.append((f"{ylabel}\n{where}" if pcols else ylabel, (frame, m, ylabel, ref)))

        def draw(ax, payload, chunk=chunk):
            g, m, ylabel, ref = payload
            _strategy_series(ax, g, chunk, g["strategy"].astype(str), "_x", m)
            if m == "samples_per_s" and len(ref) and ref["samples_per_s"].notna().any():
                ax.axhline(float(ref["samples_per_s"].median()), ls="--", color="gray", lw=1, label=LINK_REF)
            ax.set_xscale("log")
            # few labelled decades: a panel is ~2.7 inches wide and "100 Mbit/s" is long
            ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, numticks=4))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: bandwidth_text(v)))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            y = g[m].dropna()
            if len(y) and (y > 0).all() and y.max() >= 10 * y.min():  # log only where it spans a decade
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            else:
                ax.set_ylim(bottom=0)
            ax.set_ylabel(ylabel)

        notes = level_note(cells, "samples_per_s")
        out += _grid(f"{TITLES['link']} (throughput {notes}; communication: medians)", panels, draw,
                     xlabel="link bandwidth achieved (TCP probe at the cell's start; log scale)", ylabel=None,
                     ncols=len(metrics), legend_order=[strategy_label(s) for s in chunk] + [LINK_REF])  # fmt: skip
    return out


def fig_comm_sweep(d: Data):
    cm = d.comm
    if cm is None or cm.empty:
        return []
    cm = cm.assign(collective=cm["collective"].astype(str), device=cm["device"].astype(str))
    ps = sorted(cm["world_size"].unique())
    colors = dict(zip(ps, _ordered(len(ps))))
    panels = []
    for key, g in _panels(cm, ["collective", "device"]):
        for part in _chunks(sorted(g["world_size"].unique()), MAX_SERIES):
            panels.append((_key_label(["collective", "device"], key), g[g["world_size"].isin(part)]))

    def draw(ax, g):
        for p, r in g.groupby("world_size", sort=True):
            r = r.sort_values("bytes")
            ax.plot(r["bytes"], r["busbw_gbps"], marker=".", color=colors[p], label=f"p={p}")
        ax.set_xscale("log", base=2)

    figs = _grid(TITLES["comm_sweep"], panels, draw, xlabel="message size [bytes] (log scale)",
                 ylabel="bus bandwidth [GB/s] (nccl-tests definition)", legend_order=[f"p={p}" for p in ps])  # fmt: skip
    return [(None, f) for f in figs]


def _one(draw):
    """A drawing function that returns figures, as (None, figure) pairs."""
    return lambda d: [(None, f) for f in draw(d)]


KINDS = {
    "speedup": _one(fig_speedup),
    "efficiency": _one(fig_efficiency),
    "karp_flatt": _one(fig_karp_flatt),
    "phases": _one(fig_phases),
    "throughput_vs_batch": _one(fig_throughput_vs_batch),
    "memory_vs_batch": _one(fig_memory_vs_batch),
    "dataset_size": _one(fig_dataset_size),
    "rank_skew": _one(fig_rank_skew),
    "loss": fig_loss,
    "step_time": fig_step_time,
    "comm_sweep": fig_comm_sweep,
    "fixed_cost": _one(fig_fixed_cost),
    "link": _one(fig_link),
    "profile": _one(fig_profile),
    "epoch_throughput": _one(fig_epoch_throughput),
    "strategy_bars": _one(fig_strategy_bars),
    "throughput": _one(fig_throughput),
    "epoch_time": _one(fig_epoch_time),
}
# Kinds a study's report asks for (studies.Study.figures); other reports do not draw them: each is
# another view of numbers the default figures and tables already show.
ON_REQUEST = ("epoch_throughput", "strategy_bars", "throughput", "epoch_time")


def kinds_for(requested=()) -> list[str]:
    """The kinds a report draws: every kind but those drawn on request, plus the `requested` ones."""
    return [k for k in KINDS if k not in ON_REQUEST or k in requested]


def draw_all(d: Data, kinds=None):
    """(kind, stem, title, figure) for every figure the data allow (of `kinds`, default kinds_for()); parts
    after the first of a split figure get _2, _3, ... after the stem."""
    wanted = kinds_for() if kinds is None else kinds
    for kind, draw in KINDS.items():
        if kind not in wanted:
            continue
        figs = draw(d)
        count: dict = {}
        totals: dict = {}
        for strategy, _ in figs:
            totals[strategy] = totals.get(strategy, 0) + 1
        for strategy, fig in figs:
            count[strategy] = count.get(strategy, 0) + 1
            n = count[strategy]
            if strategy is None:
                stem = kind + (f"_{n}" if n > 1 else "")
            else:  # the part inside the hashed name, so no other strategy's file can have this name
                stem = f"{kind}__{_safe(strategy if n == 1 else f'{strategy} ({n})')}"
            title = TITLES[kind] + (f": {strategy}" if strategy else "")
            title += f" ({n} of {totals[strategy]})" if totals[strategy] > 1 else ""
            yield kind, strategy, stem, title, fig


# Axes a reader filters on: every varying grid axis that no figure puts on its x axis or tells
# apart as series. Each combination of them is a figure group (one model on one device, ...):
# its own small multiples, never one figure holding every cell.
PLOTTED_AXES = ("strategy", "world_size", "nodes", "batch_size", "dataset_size", "link")


def group_axes(runs: pd.DataFrame) -> list[str]:
    """The axes that split the figures into groups (none for a grid that varies only plotted axes)."""
    return [a for a in A.varying(runs, A.axes(runs)) if a not in PLOTTED_AXES]


def _of_runs(df: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame | None:
    """The rows of a per-run table (steps, profile) that belong to `runs`, by run folder: those
    tables name only some axes (steps.csv has no num_workers), so selecting by value would
    leave other groups' runs in."""
    if df is None or df.empty or "run_dir" not in df or "run_dir" not in runs:
        return df
    return df[df["run_dir"].isin(runs["run_dir"])]


def figure_groups(d: Data) -> list[tuple[str, dict, Data]]:
    """(label, {axis: value}, data of the group) per combination of `group_axes`, sorted; one
    ("", {}, d) for a grid without such axes. The collective sweep belongs to no group: the first
    group carries it."""
    cols = group_axes(d.runs)
    if not cols:
        return [("", {}, d)]
    out = []
    for key, _ in d.runs.groupby(cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        info = {c: v for c, v in zip(cols, key)}
        runs = A.matching(d.runs, info)
        part = Data(runs, A.matching(d.cells, info), A.matching(d.speed, info), A.matching(d.fits, info),
                    _of_runs(d.steps, runs), d.comm if not out else None, d.series_axes, _of_runs(d.profile, runs))  # fmt: skip
        out.append((text(", ".join(f"{c}={v}" for c, v in info.items())), info, part))
    return out


def _draw_group(args) -> list[Figure]:
    """Draw and write one group's figures of some kinds (in a worker process, or in this one)."""
    number, label, d, folder, kinds, formats = args
    prefix = f"g{number:02d}-" if label else ""
    written = []
    token = GROUP_LABEL.set(label)
    try:
        with plt.rc_context(RC):
            for kind, strategy, stem, title, fig in draw_all(d, kinds):
                for ext in formats:
                    with safe_io.atomic_write(folder / f"{prefix}{stem}.{ext}", "wb") as handle:
                        fig.savefig(handle, format=ext, metadata=METADATA[ext])
                plt.close(fig)
                written.append(Figure(kind, strategy, title + (f" — {label}" if label else ""),
                                      f"figures/{prefix}{stem}.svg", f"figures/{prefix}{stem}.pdf", label))  # fmt: skip
    finally:
        GROUP_LABEL.reset(token)
    return written


def workers(n_jobs: int) -> int:
    """Processes that draw figures: one per job up to the usable cores (DDPBENCH_REPORT_WORKERS
    overrides; 1 draws in this process)."""
    env = os.environ.get("DDPBENCH_REPORT_WORKERS", "")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = int(env) if env.isdigit() and int(env) > 0 else cores
    return max(1, min(limit, n_jobs))


def make_figures(d: Data, out: pathlib.Path, formats: tuple[str, ...] = FORMATS) -> list[Figure]:
    """Draw every figure the data allow into out/figures, in `formats` (SVG for the page, PDF for
    LaTeX); returns what was written, in group order (start_figures, waited for)."""
    with worker_pool() as pool:
        return collect(start_figures(d, out, formats, pool=pool))


# Kinds drawn from the speedup and fits tables. The others need only the runs and the cells, so
# the report starts them while the fits (the longest table) are still being computed.
FITTED_KINDS = ("speedup", "efficiency", "karp_flatt", "dataset_size")


@contextlib.contextmanager
def worker_pool(n_jobs: int = 1 << 20):
    """Worker processes (fork) for the report's tables and figures, or None where one worker is all
    there is (`workers`): then each job runs in this process when its result is asked for. Leaving
    the context stops workers still busy (the caller failed)."""
    n = workers(n_jobs)
    if n == 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield None
        return
    pool = multiprocessing.get_context("fork").Pool(n)
    try:
        yield pool
    finally:
        pool.terminate()
        pool.join()


class Drawing:
    """Figures being drawn in worker processes while the caller goes on (the report writes its
    findings and tables meanwhile); parts() waits for them, one list of figures per job."""

    def __init__(self, jobs: list, pool=None):
        self.jobs = jobs
        self.pending = pool.map_async(_draw_group, jobs, chunksize=1) if pool is not None else None

    def parts(self) -> list[list[Figure]]:
        return self.pending.get() if self.pending is not None else [_draw_group(job) for job in self.jobs]


def collect(*drawings: Drawing) -> list[Figure]:
    """The figures of one or more drawings, in page order: by group, then by kind as in KINDS."""
    order = list(KINDS)
    parts = [((job[0], order.index(job[4][0])), figs) for dr in drawings for job, figs in zip(dr.jobs, dr.parts())]
    return [f for _, figs in sorted(parts, key=lambda part: part[0]) for f in figs]


def start_figures(d: Data, out: pathlib.Path, formats: tuple[str, ...] = FORMATS, kinds=None, pool=None) -> Drawing:
    """Start drawing the figures of `kinds` (default kinds_for()) in `pool`'s workers, one job per group and
    kind: small jobs keep the workers evenly busy (3 groups on 2 cores, as whole groups, left one
    core idle for a third of the time, and a grid of one group was drawn on one core). Without a
    pool the figures are drawn in this process when they are asked for."""
    folder = safe_io.real_dir(pathlib.Path(out) / "figures")
    kinds = kinds_for() if kinds is None else [k for k in KINDS if k in kinds]
    jobs = [(i, label, g, folder, [kind], formats) for i, (label, _, g) in enumerate(figure_groups(d), 1) for kind in kinds]
    return Drawing(jobs, pool)


def _safe(name: str) -> str:
    """A file-name part for `name`: itself when it is short and only ASCII letters, digits, '-' and '_';
    else those characters ('-' for the rest), shortened, plus a hash of the name, so names never collide."""
    stem = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_" else "-" for ch in name)[:60]
    if stem != name:
        stem += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return stem
