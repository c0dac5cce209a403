"""The marks every figure draws with: a series with its intervals, horizontal bars, the interval note.

Each is few artists (a series is one line and one collection of whiskers; bars are one
collection), added to the data limits without rescaling the view each time: errorbar was a
quarter, and add_collection's rescaling a tenth, of building the figures at 8,100 runs.
Neighbouring strategies at one x are dodged apart by `DODGE` (log2 units).
"""

from __future__ import annotations

import matplotlib.collections
import numpy as np
import pandas as pd

from ddpbench.report.figures.style import strategy_label, strategy_style, text


DODGE = 0.07  # log2 units between neighbouring strategies at one p


def draw_series(ax, x, y, yerr=None, *, color, marker, ls="-", lw=1.2, ms=5, mfc=None, label=None):
    """A series as one line with its markers, and its intervals (yerr: 2 x n, below and above; NaN: none)
    as one collection of whiskers: what errorbar drew, without caps, in two artists instead of four
    (errorbar was a quarter of building the figures at 8,100 runs)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if yerr is not None:
        lo, hi = y - np.asarray(yerr[0], float), y + np.asarray(yerr[1], float)
        ok = np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ends = np.stack([np.column_stack([x[ok], lo[ok]]), np.column_stack([x[ok], hi[ok]])], axis=1)
            add_unscaled(ax, matplotlib.collections.LineCollection(ends, colors=color, linewidths=lw), ends)
    (line,) = ax.plot(x, y, ls=ls, lw=lw, color=color, marker=marker, ms=ms, mfc=mfc, label=label)  # rescales the view
    return line


def add_unscaled(ax, collection, points: np.ndarray) -> None:
    """Adds a collection and its points to the data limits without rescaling the view now (matplotlib's
    add_collection did, each time: a tenth of building the figures); the caller's next plot, or
    autoscale_view, rescales once."""
    ax.add_collection(collection, autolim=False)
    ax.update_datalim(points.reshape(-1, 2))


def interval_errors(df, col, lo=None, hi=None):
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


def hbars(ax, pos, width, left, height=0.7, **style):
    """Horizontal bars as one collection (barh made a patch per bar, each updating the limits)."""
    y0, y1 = np.asarray(pos, float) - height / 2, np.asarray(pos, float) + height / 2
    x0, x1 = np.asarray(left, float), np.asarray(left, float) + np.asarray(width, float)
    boxes = np.stack([np.column_stack(c) for c in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))], axis=1)
    add_unscaled(ax, matplotlib.collections.PolyCollection(boxes, linewidths=0.8 if "hatch" in style else 0, **style), boxes)


def hbar_intervals(ax, lo, hi) -> None:
    """The intervals of horizontal bars 0, 1, ... (lo, hi per bar; NaN: none) as one collection of
    black whiskers across each bar."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    ok, pos = np.isfinite(lo) & np.isfinite(hi), np.arange(len(lo))
    if ok.any():
        ends = np.stack([np.column_stack([lo[ok], pos[ok]]), np.column_stack([hi[ok], pos[ok]])], axis=1)
        add_unscaled(ax, matplotlib.collections.LineCollection(ends, colors="black", linewidths=1.2), ends)


def strategy_series(ax, g: pd.DataFrame, chunk: list, strategies: pd.Series, x: str, m: str) -> None:
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
        yerr = interval_errors(r, m) if f"{m}_ci_low" in r else None
        draw_series(ax, r[x] * 2**off, r[m], yerr, marker=st["marker"], color=st["color"], label=strategy_label(s))


def strategy_rows(ax, g: pd.DataFrame) -> np.ndarray:
    """The y axis: one row per strategy and world size, labelled in the strategy's colour."""
    pos = np.arange(len(g))
    ax.autoscale_view()
    ax.set_xlim(left=0)
    ax.set_yticks(pos, [text(f"{s}, p={int(p)}", 18) for s, p in zip(g["_strategy"], g["_p"])])
    for tick, s in zip(ax.get_yticklabels(), g["_strategy"]):
        tick.set_color(strategy_style(s)["color"])
    ax.set_ylim(len(g) - 0.5, -0.5)
    ax.grid(False, axis="y")
    return pos
