"""Figures against the number of workers: speedup, efficiency, Karp–Flatt, rank skew, throughput, epoch time.

One panel per combination of the panel axes, strategies as coloured series, p on a log2 axis;
speedup also gets its Amdahl or Gustafson fit (dashed) and the fit's predictions at 2× and 4×
the largest p (hollow). With one world size beyond 1, strategies stand side by side at it
(a ratio to p = 1 needs no point at p = 1).
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.layout import (MAX_LEGEND, MAX_SERIES, TITLES, balanced_chunks, by_panel, floor_at_zero,
                                            panel_label, small_multiples, thin_panels)  # fmt: skip
from ddpbench.report.figures.marks import DODGE, draw_series, interval_errors, level_note
from ddpbench.report.figures.style import strategy_label, strategy_order, strategy_style, text
from ddpbench.report.figures.tables import Data


def _workers_axis(ax, ps):
    ax.set_xscale("log", base=2)
    ticks = sorted({int(p) for p in ps})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()


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
    for chunk in balanced_chunks(strategies, min(MAX_SERIES, MAX_LEGEND - len(refs))):
        sub, omitted = thin_panels(df[df["_strategy"].isin(chunk)], pcols)
        panels = [(panel_label(pcols, key), g) for key, g in by_panel(sub, pcols)]

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
                    draw_series(ax, x, r[ycol], interval_errors(r, ycol, lo, hi), color=st["color"], marker=st["marker"],
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
                floor_at_zero(ax)

        at = f" at p = {max(ps)}" if categorical else ""
        xlabel = "strategy (colour: see legend)" if categorical else "workers p (log scale)"
        order = [strategy_label(s) for s in chunk] + refs
        out += small_multiples(f"{TITLES[kind]}{at} ({note})", panels, draw, xlabel=xlabel, ylabel=ylabel,
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
        draw_series(ax, pr["p"] * 2**off, pr["estimate"], np.vstack([pr["estimate"] - pr["ci_low"], pr["ci_high"] - pr["estimate"]]),
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
    col, unit = A.throughput_metric(d.cells)  # tokens/s for token data
    return _cells_vs_workers(d, "throughput", col, f"throughput [{unit}]", ymin0=True)


def fig_epoch_time(d: Data):
    return _cells_vs_workers(d, "epoch_time", "epoch_time_s", "epoch time [s]", ymin0=True)
