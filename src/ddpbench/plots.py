"""The report's figures (matplotlib, Agg): SVG for the HTML report, PDF for LaTeX.

Each `fig_<kind>` returns a list of (suffix, Figure) pairs, empty when the grid has no
data for it, so a figure is left out rather than drawn empty. Files are named stably:
figures/<kind>.svg|pdf, per-strategy ones figures/<kind>__<strategy>.svg|pdf (a name with
characters other than ASCII letters, digits, '-' and '_', or a long one, is shortened and
gets a hash of the original, so two strategies never share a file).

Strings from the data (strategy names, axis values, group labels) reach matplotlib only
through `text()`: '$' escaped, so mathtext never parses them, control characters dropped,
long ones shortened. Figures are written atomically (safe_io).
"""

from __future__ import annotations

import hashlib
import pathlib
import unicodedata
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ddpbench import analysis as A  # noqa: E402
from ddpbench import safe_io  # noqa: E402

# Deterministic files: no timestamps, fixed ids, text kept as text (smaller, searchable).
plt.rcParams.update(
    {
        "svg.hashsalt": "ddpbench",
        "svg.fonttype": "none",
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 100,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.fontsize": "small",
    }
)
METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}


@dataclass
class Figure:
    kind: str
    strategy: str | None
    title: str
    svg: str  # relative to the output folder
    pdf: str


@dataclass
class Data:
    runs: pd.DataFrame
    cells: pd.DataFrame
    speed: pd.DataFrame
    fits: pd.DataFrame
    steps: pd.DataFrame | None = None
    comm: pd.DataFrame | None = None

    @property
    def series_axes(self) -> list[str]:
        """Axes that tell apart lines in a plot against workers (the grid's axes minus p)."""
        return A.varying(self.runs, A.group_axes(self.runs))


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


def _series(df: pd.DataFrame, cols: list[str]):
    """(label, sub-frame) per line, with stable colours."""
    if not cols:
        yield "all runs", df  # the same label analysis.label gives fits.csv groups
        return
    for key, g in df.groupby(cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        yield ", ".join(f"{c}={v}" for c, v in zip(cols, key)), g


def _colors(n):
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _yerr(df, col):
    lo, hi = df[f"{col}_ci_low"], df[f"{col}_ci_high"]
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
    ax.set_xlabel("workers p")


def fig_speedup(d: Data):
    sp = d.speed
    groups = _scaling_series(sp, d.series_axes) if not sp.empty else []
    if not groups:
        return []
    fig, ax = plt.subplots()
    preds = d.fits[(d.fits["kind"] == "prediction") & d.fits["law"].isin(["amdahl", "gustafson"])] if not d.fits.empty else d.fits
    all_p = [*sp["world_size"], *(preds["p"] if not preds.empty else [])]
    for (name, g), color in zip(groups, _colors(len(groups))):
        g = g.sort_values("world_size")
        ax.errorbar(g["world_size"], g["speedup"], yerr=_yerr(g, "speedup"), marker="o", color=color, label=text(name), capsize=3)
        ax.fill_between(g["world_size"], g["speedup"], g["world_size"], color=color, alpha=0.08)
        fit = _fit_rows(d.fits, name)
        law = fit["law"].iloc[0] if not fit.empty else None
        if law:
            q = np.geomspace(1, max(all_p), 50)
            ax.plot(q, _fitted_speedup(fit, law, q, g), "--", color=color, lw=1)
            pr = fit[fit["kind"] == "prediction"]
            ax.errorbar(pr["p"], pr["estimate"], yerr=np.vstack([pr["estimate"] - pr["ci_low"], pr["ci_high"] - pr["estimate"]]),
                        fmt="o", mfc="none", color=color, capsize=3)  # fmt: skip
    ideal = np.array(sorted({1, *map(float, all_p)}))
    ax.plot(ideal, ideal, ":", color="gray", label="ideal S = p")
    ax.plot([], [], "--", color="gray", lw=1, label="fit (Amdahl / Gustafson)")
    ax.plot([], [], "o", mfc="none", color="gray", label="prediction (fit, 2× and 4× max p)")
    _workers_axis(ax, ideal)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(0.9, max(ideal) * 1.1)
    ax.set_ylabel("speedup S(p)" if (sp["measure"] == "speedup").all() else "(scaled) speedup S(p)")
    ax.set_title(f"{TITLES['speedup']} (shaded: efficiency loss; {level_note(sp, 'speedup')})", fontsize=9)
    _legend_outside(ax)
    return [(None, fig)]


def _scaling_series(sp: pd.DataFrame, cols: list[str]):
    """Lines for speedup-type plots: those measured at some p > 1 (p = 1 alone is the baseline)."""
    return [(n, g) for n, g in _series(sp, cols) if g["world_size"].max() > 1]


def _legend_outside(ax):
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def _short(col: str, value) -> str:
    names = {"world_size": "p", "strategy": "", "batch_size": "batch", "dataset_size": "n"}
    name = names.get(col, col)
    return f"{name}={value}" if name else str(value)


def _fit_rows(fits: pd.DataFrame, name: str) -> pd.DataFrame:
    if fits.empty:
        return fits
    # Series labels and fits.csv group labels are both analysis.label over the same axes.
    return fits[(fits["group"] == name) & fits["law"].isin(["amdahl", "gustafson"]) & fits["estimate"].notna()]


def _fitted_speedup(fit, law, q, g):
    par = fit.set_index("parameter")["estimate"]
    if law == "gustafson":
        return A.gustafson_speedup(q, par["alpha"])
    return g["baseline_time_s"].median() / A.amdahl_time(q, par["t1_s"], par["f"])


def fig_efficiency(d: Data):
    sp = d.speed
    groups = _scaling_series(sp, d.series_axes) if not sp.empty else []
    if not groups:
        return []
    fig, ax = plt.subplots()
    for (name, g), color in zip(groups, _colors(len(groups))):
        g = g.sort_values("world_size")
        ax.errorbar(g["world_size"], g["efficiency"], yerr=_yerr(g, "efficiency"), marker="o", color=color, label=text(name), capsize=3)
    ax.axhline(1.0, ls=":", color="gray", label="ideal E = 1")
    _workers_axis(ax, sp["world_size"])
    ax.set_ylim(0, max(1.1, float(np.nanmax(sp["efficiency"])) * 1.1))
    ax.set_ylabel("efficiency E(p) = S(p)/p")
    ax.set_title(f"{TITLES['efficiency']} ({level_note(sp, 'speedup')})", fontsize=9)
    _legend_outside(ax)
    return [(None, fig)]


PHASES = [("phase_data_s", "data"), ("phase_forward_s", "forward"), ("phase_backward_s", "backward"),
          ("phase_optimizer_s", "optimizer"), ("phase_exposed_comm_s", "exposed comm")]  # fmt: skip
# Step time outside the pacing rank's named phases: drawn when runs carry it (older runs do not).
OTHER_PHASE = ("phase_other_s", "other")


def fig_phases(d: Data):
    need = [c for c, _ in PHASES] + ["phase_comm_s", "timed_steps"]
    ok = d.runs[d.runs["status"] == "ok"]
    if ok.empty or not set(need) <= set(ok.columns) or ok[need].isna().all().all():
        return []
    phases = PHASES + ([OTHER_PHASE] if OTHER_PHASE[0] in ok and ok[OTHER_PHASE[0]].notna().any() else [])
    per_step = ok[[c for c, _ in phases] + ["phase_comm_s"]].div(ok["timed_steps"], axis=0)
    cols = [c for c in A.varying(d.runs, A.axes(d.runs))] or ["world_size"]
    med = pd.concat([ok[cols], per_step], axis=1).groupby(cols, dropna=False, sort=True).median().reset_index()
    labels = [text(" ".join(_short(c, r[c]) for c in cols)) for _, r in med.iterrows()]
    rows = np.arange(len(med))  # positions, not categories: two rows whose shortened labels agree stay apart
    fig, ax = plt.subplots(figsize=(6.4, 1.2 + 0.28 * len(med)))
    left = np.zeros(len(med))
    for (col, name), color in zip(phases, _colors(10)):
        v = med[col].fillna(0).to_numpy()
        ax.barh(rows, v, left=left, color=color, label=name)
        left += v
    hidden = (med["phase_comm_s"] - med["phase_exposed_comm_s"]).clip(lower=0).fillna(0).to_numpy()
    if hidden.any():
        ax.barh(rows, hidden, left=left, color="none", edgecolor="gray", hatch="///", label="overlapped comm (hidden)")
    ax.set_yticks(rows, labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per timed step (median over repeats; pacing rank)")
    ax.set_title(TITLES["phases"], fontsize=9)
    _legend_outside(ax)
    return [(None, fig)]


def _numeric(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


AXIS_LABELS = {
    "batch_size": "batch size (global: strong scaling; per rank: weak)",
    "dataset_size": "dataset size [training samples]",
}


def _vs_axis(d: Data, axis: str, metrics: list[tuple[str, str]], logx=True):
    """Cells' medians of `metrics` against a numeric axis, one line per other combination."""
    c = d.cells
    if axis not in c or _numeric(c[axis]).nunique() < 2:
        return None
    c = c.assign(**{axis: _numeric(c[axis])}).dropna(subset=[axis])
    metrics = [(m, y) for m, y in metrics if m in c and c[m].notna().any()]
    if not metrics:
        return None
    others = [a for a in A.varying(d.runs, A.axes(d.runs)) if a != axis]
    fig, axs = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8), squeeze=False)
    series = list(_series(c, others))
    for ax, (m, ylabel) in zip(axs[0], metrics):
        for (name, g), color in zip(series, _colors(len(series))):
            g = g.dropna(subset=[m]).sort_values(axis)
            if g.empty:
                continue
            yerr = _yerr(g, m) if f"{m}_ci_low" in g else None
            ax.errorbar(g[axis], g[m], yerr=yerr, marker="o", color=color, label=text(name), capsize=3)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(AXIS_LABELS.get(axis, axis.replace("_", " ")))
        ax.set_ylabel(ylabel)
        ax.set_title(level_note(c, m) if f"{m}_ci_level" in c else "no intervals", fontsize=8)
    _legend_outside(axs[0][-1])
    return fig


def fig_throughput_vs_batch(d: Data):
    fig = _vs_axis(d, "batch_size", [("samples_per_s", "samples/s")])
    return [(None, fig)] if fig else []


def fig_memory_vs_batch(d: Data):
    fig = _vs_axis(d, "batch_size", [("peak_rss_mb", "peak RSS [MB] (max over ranks)"), ("cuda_max_allocated_mb", "peak CUDA allocated [MB]")])
    return [(None, fig)] if fig else []


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
    fig = _vs_axis(Data(d.runs, cells, sp, d.fits), "dataset_size",
                   [("epoch_time_s", "epoch time [s]"), ("speedup", "speedup"), ("efficiency", "efficiency")])  # fmt: skip
    return [(None, fig)] if fig else []


def _per_strategy_steps(d: Data, ycol: str, reduce: str, ylabel: str):
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
    for strategy, s in first.groupby("strategy", sort=True):
        per_step = s.groupby(["run_dir", "step"], sort=True).agg(
            y=(ycol, reduce), timed=("timed", "min"), world_size=("world_size", "first")
        ).reset_index()
        if per_step["y"].notna().sum() == 0:
            continue
        fig, ax = plt.subplots()
        if strategy != A.BASELINE_STRATEGY and not reference.empty:
            # The single-worker loss curve: exact strategies should follow it, approximate ones may drift.
            ref = reference.groupby(["run_dir", "step"], sort=True)[ycol].mean().reset_index()
            for i, (_, g) in enumerate(ref.groupby("run_dir")):
                ax.plot(g["step"], g[ycol], "--", color="gray", lw=1, label=text(f"{A.BASELINE_STRATEGY} (reference)") if i == 0 else None)
        runs = sorted(per_step["run_dir"].unique(), key=lambda r: (per_step.loc[per_step.run_dir == r, "world_size"].iloc[0], r))
        for run, color in zip(runs, _colors(len(runs))):
            g = per_step[per_step["run_dir"] == run]
            meta = s[s["run_dir"] == run].iloc[0]
            extra = [f"{c}={meta[c]}" for c in ("batch_size", "dataset_size", "model") if c in s and s[c].nunique() > 1]
            ax.plot(g["step"], g["y"], color=color, lw=1, label=text(", ".join([f"p={meta['world_size']}", *extra])))
            untimed = g[g["timed"] == 0]
            ax.plot(untimed["step"], untimed["y"], "x", color=color, ms=4)
        ax.set_xlabel("step (x: warm-up, not timed)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{TITLES['loss' if ycol == 'loss' else 'step_time']}: {text(strategy)}", fontsize=9)
        _legend_outside(ax)
        out.append((str(strategy), fig))
    return out


def fig_loss(d: Data):
    return _per_strategy_steps(d, "loss", "mean", "training loss (mean over ranks)")


def fig_step_time(d: Data):
    return _per_strategy_steps(d, "total_s", "max", "step time [s] (slowest rank)")


def fig_karp_flatt(d: Data):
    kf = d.fits[(d.fits["law"] == "karp_flatt") & d.fits["estimate"].notna()] if not d.fits.empty else d.fits
    if kf.empty:
        return []
    fig, ax = plt.subplots()
    groups = sorted(kf["group"].unique())
    for grp, color in zip(groups, _colors(len(groups))):
        g = kf[kf["group"] == grp].sort_values("p")
        err = np.vstack([g["estimate"] - g["ci_low"], g["ci_high"] - g["estimate"]])
        ax.errorbar(g["p"], g["estimate"], yerr=err, marker="o", color=color, label=text(grp), capsize=3)
    _workers_axis(ax, kf["p"])
    ax.set_ylabel("e(p) = (1/S − 1/p) / (1 − 1/p)")
    ax.set_title(TITLES["karp_flatt"] + " (rising: overhead grows with p)", fontsize=9)
    _legend_outside(ax)
    return [(None, fig)]


def fig_rank_skew(d: Data):
    c = d.cells
    if "rank_skew" not in c:
        return []
    c = c[(c["world_size"] > 1) & c["rank_skew"].notna()]
    if c.empty:
        return []
    fig, ax = plt.subplots()
    series = list(_series(c, d.series_axes))
    for (name, g), color in zip(series, _colors(len(series))):
        g = g.sort_values("world_size")
        ax.errorbar(g["world_size"], g["rank_skew"], yerr=_yerr(g, "rank_skew"), marker="o", color=color, label=text(name), capsize=3)
    _workers_axis(ax, c["world_size"])
    ax.set_ylabel("rank skew: median (max − min)/max of rank step times")
    ax.set_title(f"{TITLES['rank_skew']} (median; {level_note(c, 'rank_skew')})", fontsize=9)
    _legend_outside(ax)
    return [(None, fig)]


def fig_comm_sweep(d: Data):
    cm = d.comm
    if cm is None or cm.empty:
        return []
    fig, ax = plt.subplots()
    series = list(_series(cm, ["collective", "device", "world_size"]))
    for (name, g), color in zip(series, _colors(len(series))):
        g = g.sort_values("bytes")
        ax.plot(g["bytes"], g["busbw_gbps"], marker=".", color=color, label=text(name))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size [bytes]")
    ax.set_ylabel("bus bandwidth [GB/s] (nccl-tests definition)")
    ax.set_title(TITLES["comm_sweep"], fontsize=9)
    _legend_outside(ax)
    return [(None, fig)]


KINDS = {
    "speedup": fig_speedup,
    "efficiency": fig_efficiency,
    "karp_flatt": fig_karp_flatt,
    "phases": fig_phases,
    "throughput_vs_batch": fig_throughput_vs_batch,
    "memory_vs_batch": fig_memory_vs_batch,
    "dataset_size": fig_dataset_size,
    "rank_skew": fig_rank_skew,
    "loss": fig_loss,
    "step_time": fig_step_time,
    "comm_sweep": fig_comm_sweep,
}


def make_figures(d: Data, out: pathlib.Path) -> list[Figure]:
    """Draw every figure the data allow into out/figures; returns what was written."""
    folder = safe_io.real_dir(pathlib.Path(out) / "figures")
    written = []
    for kind, draw in KINDS.items():
        for strategy, fig in draw(d):
            stem = kind if strategy is None else f"{kind}__{_safe(strategy)}"
            for ext in ("svg", "pdf"):
                with safe_io.atomic_write(folder / f"{stem}.{ext}", "wb") as handle:
                    fig.savefig(handle, format=ext, metadata=METADATA[ext], bbox_inches="tight")
            plt.close(fig)
            title = TITLES[kind] + (f": {strategy}" if strategy else "")
            written.append(Figure(kind, strategy, title, f"figures/{stem}.svg", f"figures/{stem}.pdf"))
    return written


def _safe(name: str) -> str:
    """A file-name part for `name`: itself when it is short and only ASCII letters, digits, '-' and '_';
    else those characters ('-' for the rest), shortened, plus a hash of the name, so names never collide."""
    stem = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_" else "-" for ch in name)[:60]
    if stem != name:
        stem += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return stem
