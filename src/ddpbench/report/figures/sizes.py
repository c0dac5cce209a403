"""Figures against batch size and dataset size: throughput, peak memory, epoch time, speedup, efficiency.

The cells' medians against the size (log2 axis), strategies as series, one panel per metric
and combination of the other axes (world size included). Cells of batch_size auto are starred
at the batch they chose.
"""

from __future__ import annotations

import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.layout import (MAX_PANELS, MAX_SERIES, TITLES, balanced_chunks, by_panel, panel_label,
                                            small_multiples, thin_panels)  # fmt: skip
from ddpbench.report.figures.marks import level_note, strategy_series
from ddpbench.report.figures.style import strategy_label, strategy_order, strategy_style
from ddpbench.report.figures.tables import Data, numeric


AXIS_LABELS = {
    "batch_size": "batch size [samples] (global: strong scaling; per rank: weak)",
    "dataset_size": "dataset size [training samples]",
}


def _vs_axis(d: Data, kind: str, axis: str, metrics: list[tuple[str, str]], logx=True):
    """Cells' medians of `metrics` against a numeric axis: strategies as series, one panel per metric and
    combination of the other axes (world size included)."""
    c = d.cells
    if axis not in c or numeric(c[axis]).nunique() < 2:
        return []
    auto = _auto_batch_cells(d, c) if axis == "batch_size" else c.iloc[0:0]
    c = pd.concat([c.assign(**{axis: numeric(c[axis])}).dropna(subset=[axis]).assign(_auto=False), auto])
    metrics = [(m, y) for m, y in metrics if m in c and c[m].notna().any()]
    if not metrics:
        return []
    c = c.assign(_strategy=c["strategy"].astype(str))
    pcols = [a for a in A.varying(d.runs, A.axes(d.runs)) if a not in (axis, "strategy") and a in c]
    strategies = strategy_order(c["_strategy"].unique())
    out = []
    for chunk in balanced_chunks(strategies, MAX_SERIES):
        sub, omitted = thin_panels(c[c["_strategy"].isin(chunk)], pcols, MAX_PANELS // len(metrics))
        panels = []
        for key, g in by_panel(sub, pcols):
            for m, ylabel in metrics:
                if g[m].notna().any():
                    where = panel_label(pcols, key)
                    panels.append((f"{ylabel}\n{where}" if len(metrics) > 1 else where, (g, m, ylabel)))

        def draw(ax, payload, chunk=chunk):
            g, m, ylabel = payload
            fixed, chosen = g[~g["_auto"].astype(bool)], g[g["_auto"].astype(bool)]
            strategy_series(ax, fixed, chunk, fixed["_strategy"], axis, m)
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
        out += small_multiples(f"{TITLES[kind]} ({notes})", panels, draw,
                               xlabel=AXIS_LABELS.get(axis, axis.replace("_", " ")),
                               ylabel=metrics[0][1] if len(metrics) == 1 else None,
                               ncols=len(metrics) if len(metrics) > 1 else None,
                               legend_order=[strategy_label(s) for s in chunk] + [AUTO_LABEL],
                               omitted=omitted)  # fmt: skip
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


def fig_throughput_vs_batch(d: Data):
    col, unit = A.throughput_metric(d.cells)  # tokens/s for token data
    return _vs_axis(d, "throughput_vs_batch", "batch_size", [(col, f"throughput [{unit}]")])


def fig_memory_vs_batch(d: Data):
    return _vs_axis(d, "memory_vs_batch", "batch_size",
                    [("peak_rss_mb", "peak RSS [MiB] (max over ranks)"), ("cuda_max_allocated_mb", "peak CUDA allocated [MiB]")])  # fmt: skip


def fig_dataset_size(d: Data):
    c = d.cells
    if "dataset_size" not in c or numeric(c["dataset_size"]).nunique() < 2:
        return []
    sp = d.speed
    cols = [*A.axes(d.runs), "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_ci_level", "efficiency",
            "efficiency_ci_low", "efficiency_ci_high"]  # fmt: skip
    # Efficiency is the speedup over p: its interval has the speedup's level.
    sp = sp.assign(efficiency_ci_level=sp["speedup_ci_level"]) if "speedup_ci_level" in sp else sp
    cells = c.merge(sp[[k for k in [*cols, "efficiency_ci_level"] if k in sp]], how="left", on=A.axes(d.runs)) if not sp.empty else c
    return _vs_axis(Data(d.runs, cells, sp, d.fits), "dataset_size", "dataset_size",
                    [("epoch_time_s", "epoch time [s]"), ("speedup", "speedup S(p)"), ("efficiency", "efficiency E(p)")])  # fmt: skip
