"""Figures of training itself: loss and step time per step, throughput per epoch, and per strategy
the time per round, throughput and test accuracy.

Loss and step time are one figure per strategy (a line per world size; the single process's
loss as the reference). Throughput per epoch and the per-strategy bars are drawn on a study's
request (kinds.ON_REQUEST).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.layout import (MAX_LEGEND, MAX_PANELS, MAX_SERIES, TITLES, balanced_chunks, by_panel,
                                            floor_at_zero, panel_label, small_multiples, thin_panels)  # fmt: skip
from ddpbench.report.figures.marks import hbar_intervals, draw_series, hbars, strategy_rows
from ddpbench.report.figures.style import ordered_colors, strategy_label, strategy_order, strategy_style, text
from ddpbench.report.figures.tables import Data


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
        colors = dict(zip(ps, ordered_colors(len(ps))))
        panels = []
        for key, g in by_panel(meta.reset_index(), pcols):
            run_ids = list(g.sort_values(["world_size", "run_dir"])["run_dir"])
            for part in balanced_chunks(run_ids, MAX_SERIES - 1):
                panels.append((panel_label(pcols, key), (part, key)))
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
        for fig in small_multiples(f"{TITLES[kind]}: {text(strategy)}", panels, draw, xlabel="step",
                                   ylabel=ylabel, legend_order=order):  # fmt: skip
            out.append((str(strategy), fig))
    return out


def fig_loss(d: Data):
    return _per_strategy_steps(d, "loss", "loss", "mean", "training loss (mean over ranks)")


def fig_step_time(d: Data):
    return _per_strategy_steps(d, "step_time", "total_s", "max", "step time [s] (slowest rank)")


# -- drawn on a study's request (the accelerators study): per epoch, per strategy ----------------------

P_STYLES = ("-", "--", ":", "-.")  # line style by world size where strategies share a panel


def fig_epoch_throughput(d: Data):
    """Throughput of each epoch (global samples, tokens for token data, over the steps' pacing time,
    steps.csv), one line per strategy and world size, one panel per combination of the panel axes: how
    throughput settles after the first epoch (its warm-up steps, hollow) and what each device reaches."""
    if d.steps is None or d.steps.empty:
        return []
    pcols = list(d.panel_axes)
    tokens = A.throughput_metric(d.cells)[0] == "tokens_per_s" and "seq_len" in d.runs  # samples/s x seq_len
    unit = "tokens/s" if tokens else "samples/s"
    per_token = ["seq_len"] if tokens and "seq_len" not in pcols else []
    t = A.epoch_throughput(d.runs, d.steps, ["strategy", "world_size", *pcols, *per_token])
    if t.empty or t["epoch"].nunique() < 2:
        return []
    if tokens:
        t["samples_per_s"] = t["samples_per_s"] * pd.to_numeric(t["seq_len"], errors="coerce")
    t = t.assign(_strategy=t["strategy"].astype(str), _p=pd.to_numeric(t["world_size"], errors="coerce"))
    ps = sorted(t["_p"].dropna().unique())
    series = [(s, p) for s in strategy_order(t["_strategy"].unique()) for p in ps
              if ((t["_strategy"] == s) & (t["_p"] == p)).any()]  # fmt: skip
    name = lambda s, p: f"{text(s)}, p={int(p)}"  # noqa: E731
    warm = "epoch with warm-up steps (hollow)"
    out = []
    for chunk in balanced_chunks(series, min(MAX_SERIES, MAX_LEGEND - 1)):
        keep = pd.Series(list(zip(t["_strategy"], t["_p"])), index=t.index).isin(chunk)
        sub, omitted = thin_panels(t[keep], pcols)

        def draw(ax, g, chunk=chunk):
            for s, p in chunk:
                r = g[(g["_strategy"] == s) & (g["_p"] == p)].sort_values("epoch")
                if r.empty:
                    continue
                st = strategy_style(s)
                x = r["epoch"].to_numpy(float) + 1
                draw_series(ax, x, r["samples_per_s"], color=st["color"], marker=st["marker"], ls=P_STYLES[ps.index(p) % len(P_STYLES)],
                            label=name(s, p))  # fmt: skip
                w = r["warmup"].to_numpy(bool)
                ax.plot(x[w], r["samples_per_s"].to_numpy(float)[w], ls="none", marker=st["marker"], ms=7, mfc="white",
                        color=st["color"])  # fmt: skip
            ax.plot([], [], ls="none", marker="o", ms=7, mfc="white", color="gray", label=warm)
            epochs = sorted(g["epoch"].unique())
            ax.set_xticks([e + 1 for e in epochs], [str(int(e) + 1) for e in epochs])
            floor_at_zero(ax)

        panels = [(panel_label(pcols, key), g) for key, g in by_panel(sub, pcols)]
        out += small_multiples("Throughput per epoch (median over repeats; pacing rank's steps, warm-up included)",
                               panels, draw, xlabel="epoch", ylabel=f"throughput [{unit}]", sharey=True,
                               legend_order=[name(*c) for c in chunk] + [warm], omitted=omitted)  # fmt: skip
    return out


def strategy_metrics(cells: pd.DataFrame) -> list[tuple[str, str]]:
    """The strategy bars' panels: time per round, throughput (tokens/s for token data), test accuracy."""
    col, unit = A.throughput_metric(cells)
    return [("round_ms", "time per round [ms]"), (col, f"throughput [{unit}]"), ("test_acc_pct", "test accuracy [%]")]


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
    metrics = [(m, y) for m, y in strategy_metrics(c) if m in c and c[m].notna().any()]

    def draw(ax, payload):
        g, m = payload
        ax.set_xlabel(dict(metrics)[m])
        for i, (s, val) in enumerate(zip(g["_strategy"], g[m].to_numpy(float))):
            if np.isfinite(val):
                hbars(ax, [i], [val], [0.0], facecolor=strategy_style(s)["color"], label=strategy_label(s))
        hbar_intervals(ax, g[f"{m}_ci_low"], g[f"{m}_ci_high"])
        strategy_rows(ax, g)

    out = []
    for chunk in balanced_chunks(strategy_order(c["_strategy"].unique()), MAX_SERIES):
        sub, omitted = thin_panels(c[c["_strategy"].isin(chunk)], pcols, max(1, MAX_PANELS // len(metrics)))
        panels = []
        for key, g in by_panel(sub, pcols):
            g = g.assign(_o=g["_strategy"].map({s: i for i, s in enumerate(chunk)})).sort_values(["_o", "_p"])
            where = panel_label(pcols, key)
            panels += [(where or ylabel, (g, m)) for m, ylabel in metrics]
        n_rows = max(len(g) for _, (g, _) in panels)
        out += small_multiples("Time per round, throughput and accuracy per strategy (geometric means, accuracy: "
                               "medians; bars: intervals)", panels, draw, xlabel=None, ylabel="strategy, world size p",
                               ncols=len(metrics), panel_size=(2.6, 0.45 + 0.3 * n_rows),
                               legend_order=[strategy_label(s) for s in chunk], omitted=omitted)  # fmt: skip
    return out
