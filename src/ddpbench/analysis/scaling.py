"""Speedup against a baseline (speedup.csv) and the scaling-law fits per group (fits.csv).

speedup_table: every cell against the baseline strategy's p = 1 runs with the same settings, as a
Welch ratio interval, with efficiency and the stability of both sides. fits_table: per scaling
group (a cell without its worker count), Amdahl or Gustafson, Karp–Flatt and the cost model, with
predictions beyond the largest measured p.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.analysis.cost_model import N_BOOT, fit_comm_sweep, fit_cost_model
from ddpbench.analysis.fits import amdahl_time, fit_amdahl, fit_gustafson, karp_flatt
from ddpbench.analysis.health import MAX_REL_CI, stability
from ddpbench.analysis.comparison import Comparison, DesignAnswers, Source
from ddpbench.analysis.intervals import LEVEL, Interval, log_t_interval, welch_log_ratio
from ddpbench.analysis.tables import (
    BASELINE_STRATEGY,
    IRRELEVANT_AT_BASELINE,
    LAUNCH_AXES,
    TIME,
    axes,
    group_axes,
    label,
    numeric_column,
    run_version,
    text_key,
    varying,
)

SPEEDUP_COLUMNS = [
    "n_repeats", "baseline", "baseline_n", "time_s", "baseline_time_s", "measure", "speedup", "speedup_ci_low",
    "speedup_ci_high", "speedup_ci_level", "efficiency", "efficiency_ci_low", "efficiency_ci_high", "unstable",
    "unstable_cause", "versions_differ", "interval_from",
]  # fmt: skip


# -- speedup and efficiency --------------------------------------------------------------


def speedup_table(
    runs: pd.DataFrame, baseline_strategy: str = BASELINE_STRATEGY, max_rel_ci: float = MAX_REL_CI,
    design: DesignAnswers | None = None,
) -> pd.DataFrame:
    """Speedup and efficiency of every cell against its baseline, with Welch log-t intervals.

    Baseline: `baseline_strategy` (default `single`) at p = 1 with every other axis equal (settings that cannot matter
    for it relaxed if needed); else the strategy's own p = 1 cell; else none (no row).
    S = geometric-mean baseline time / geometric-mean cell time; for weak scaling the same ratio
    of epoch times is the scaled speedup p·t(1)/t(p). A row is unstable when its cell or its baseline is.
    Where a sequential design ran (`design`), a cell whose speedup question (the cell against the
    baseline strategy at p = 1, every other axis equal: plan.design.grid_questions) it asked takes its
    comparison: its repeated interval for S(p) (the throughput ratio: an epoch's samples are the same on
    both sides) and S/p for E(p); every other row's interval is descriptive (interval_from).
    """
    cols = axes(runs)
    other = [c for c in cols if c not in ("strategy", *LAUNCH_AXES)]
    relaxed = [c for c in other if c not in IRRELEVANT_AT_BASELINE]
    ok = runs[(runs["status"] == "ok") & runs[TIME].notna()] if TIME in runs else runs.iloc[:0]
    if ok.empty or "world_size" not in ok:
        return pd.DataFrame(columns=[*cols, *SPEEDUP_COLUMNS])
    p1 = ok[ok["world_size"] == 1]
    single = p1[p1["strategy"] == baseline_strategy] if "strategy" in p1 else p1
    own_cols = [c for c in cols if c not in LAUNCH_AXES]
    # Candidate baselines, most specific first: the matching runs per key.
    candidates = [(other, _runs_by(single, other), baseline_strategy),
                  (relaxed, _runs_by(single, relaxed), baseline_strategy),
                  (own_cols, _runs_by(p1, own_cols), "own p=1")]  # fmt: skip

    memo = _SideMemo(ok, max_rel_ci)
    rows = []
    for key, g in ok.groupby(cols, dropna=False, sort=True):
        row = dict(zip(cols, key))
        p = int(row["world_size"])
        found = [(index[text_key(row[c] for c in by)], kind)
                 for by, index, kind in candidates if text_key(row[c] for c in by) in index]  # fmt: skip
        if not found:
            continue
        base_runs, kind = found[0]
        base, t = base_runs[TIME].to_numpy(), g[TIME].to_numpy()
        if p == 1 and (kind == "own p=1" or row.get("strategy") == baseline_strategy):
            s = Interval(1.0, *((1.0, 1.0, LEVEL) if len(t) > 1 else ()))  # the baseline itself
        else:
            s = welch_log_ratio(base, t)
        s = _speedup(design, {c: row[c] for c in cols}, baseline_strategy, s)
        weak = str(row.get("scaling", "strong")) == "weak"
        row.update(
            n_repeats=len(t),
            baseline=kind,
            baseline_n=len(base),
            time_s=log_t_interval(t).estimate,
            baseline_time_s=log_t_interval(base).estimate,
            measure="scaled speedup" if weak else "speedup",
            speedup=s.ratio,
            speedup_ci_low=s.low,
            speedup_ci_high=s.high,
            speedup_ci_level=s.level,
            efficiency=s.ratio / p,
            efficiency_ci_low=s.low / p,
            efficiency_ci_high=s.high / p,
            **_pair_stability({"cell": g, "baseline": base_runs}, max_rel_ci, memo),
            versions_differ=memo.versions_differ(g, base_runs),
            interval_from=s.source,
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=[*cols, *SPEEDUP_COLUMNS])


def _speedup(design: DesignAnswers | None, values: dict, baseline_strategy: str, s: Interval) -> Comparison:
    """A cell against its baseline (the throughput ratio: an epoch's samples are the same on both sides):
    the design's comparison where it asked, else the measured interval `s` (descriptive where a design ran)."""
    if design is None:
        return Comparison.of_interval(s)
    cell, base = design.cell(values), design.cell({**values, "strategy": baseline_strategy, "world_size": 1})
    return design.between(cell, base) or Comparison.of_interval(s, cell or "", base or "", Source.DESCRIPTIVE)


def versions_differ(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """A ratio of two sides measured with different code or packages: flagged, since the
    difference may be the change rather than the setting."""
    return set(run_version(a)) != set(run_version(b))


class _SideMemo:
    """stability() and run versions of the sides of ratios, each side computed once: in a large
    grid one baseline serves many cells and one cell appears in a comparison with every other
    strategy. Sides are row subsets of `runs`, known by their index."""

    def __init__(self, runs: pd.DataFrame, max_rel_ci: float):
        self.max_rel_ci = max_rel_ci
        self.version = run_version(runs)
        self.stable: dict[tuple, tuple[bool, str, float]] = {}
        self.seen_versions: dict[tuple, frozenset] = {}

    def stability(self, df: pd.DataFrame) -> tuple[bool, str, float]:
        key = tuple(df.index)
        if key not in self.stable:
            self.stable[key] = stability(df, self.max_rel_ci)
        return self.stable[key]

    def versions(self, df: pd.DataFrame) -> frozenset:
        key = tuple(df.index)
        if key not in self.seen_versions:
            self.seen_versions[key] = frozenset(self.version[df.index])
        return self.seen_versions[key]

    def versions_differ(self, a: pd.DataFrame, b: pd.DataFrame) -> bool:
        return self.versions(a) != self.versions(b)


def _pair_stability(sides: dict[str, pd.DataFrame], max_rel_ci: float, memo: _SideMemo | None = None) -> dict:
    """unstable / unstable_cause of a ratio: either side unstable makes it so; causes name their side."""
    parts = []
    for side, df in sides.items():
        unstable, cause, _ = memo.stability(df) if memo else stability(df, max_rel_ci)
        if unstable:
            parts.append(f"{side}: {cause}")
    return dict(unstable=bool(parts), unstable_cause="; ".join(parts))


def _runs_by(df: pd.DataFrame, by: list[str]) -> dict[tuple[str, ...], pd.DataFrame]:
    if not by:
        return {(): df} if len(df) else {}
    return {text_key(k): g for k, g in df.groupby(by, dropna=False)}


# -- fits per scaling group ---------------------------------------------------------------

FIT_COLUMNS = ["group", "law", "parameter", "p", "kind", "estimate", "ci_low", "ci_high", "n_points", "r2", "note"]


def fits_table(
    runs: pd.DataFrame,
    speed: pd.DataFrame,
    comm: pd.DataFrame | None = None,
    baseline_strategy: str = BASELINE_STRATEGY,
    n_boot: int = N_BOOT,
) -> pd.DataFrame:
    """fits.csv: one row per group, law and parameter; predictions at 2× and 4× the largest
    measured p are rows of kind 'prediction'; fits without enough points say so, with no number."""
    rows: list[dict] = []
    sweep = fit_comm_sweep(comm) if comm is not None else pd.DataFrame()
    for _, s in sweep.iterrows():
        grp = f"device={s['device']}, backend={s['backend']}"
        for name, value in (("alpha_s", s["alpha_s"]), ("bandwidth_gbps", s["bandwidth_Bps"] / 1e9)):
            rows.append(dict(group=grp, law="comm_sweep", parameter=name, kind="fit", estimate=value,
                             n_points=s["n_points"], r2=s["r2"], note="all_reduce in the collective sweep"))  # fmt: skip
    if speed.empty:
        return pd.DataFrame(rows, columns=FIT_COLUMNS)
    gcols = group_axes(runs)
    shown = varying(runs, gcols)
    ok = runs[(runs["status"] == "ok") & runs[TIME].notna()]
    # Each group's runs by its settings as text, looked up once for all groups
    texts = pd.DataFrame({c: ok[c].astype(str) for c in gcols})
    by_text = {k if isinstance(k, tuple) else (k,): ix for k, ix in texts.groupby(gcols, sort=False).indices.items()} if gcols else {}
    p1 = runs[(runs["status"] == "ok") & (runs["world_size"] == 1)]  # the baselines' runs, filtered once
    base_times: dict = {}
    for key, sg in speed.groupby(gcols, dropna=False, sort=True):
        info = dict(zip(gcols, key))
        if info.get("strategy") == baseline_strategy and sg["world_size"].max() == 1:
            continue  # the baseline itself: nothing scales
        grp = label(info, shown)
        g = ok.iloc[by_text.get(tuple(str(v) for v in info.values()), [])] if gcols else ok
        p_max = int(sg["world_size"].max())
        t_base = float(sg["baseline_time_s"].median())
        weak = str(info.get("scaling", "strong")) == "weak"

        def add(law, parameter, kind="fit", iv=None, p=np.nan, n=np.nan, r2=np.nan, note="", **_):
            iv = iv or Interval(np.nan)
            rows.append(dict(group=grp, **info, law=law, parameter=parameter, p=p, kind=kind, estimate=iv.estimate,
                             ci_low=iv.low, ci_high=iv.high, n_points=n, r2=r2, note=note))

        def add_fit(law, fit, to_speedup):
            if isinstance(fit, str):
                add(law, "-", kind="too few points" if fit.startswith("too few") else "not fitted", note=fit, n=len(g))
                return
            for name, iv in fit.params.items():
                add(law, name, iv=iv, n=fit.n_points, r2=fit.r2, note=fit.note)
            for q in (2 * p_max, 4 * p_max):
                add(law, "speedup", kind="prediction", iv=to_speedup(fit, q), p=q, n=fit.n_points,
                    note=f"prediction at {q // p_max}× the largest measured p")

        if weak:
            add_fit("gustafson", fit_gustafson(g["world_size"], t_base / g[TIME]), lambda f, q: Interval(float(f.predict(q))))
            continue

        def amdahl_speedup(fit, q):
            f_iv, t1 = fit.params["f"], fit.params["t1_s"].estimate
            s = lambda f: float(t_base / amdahl_time(q, t1, f))  # noqa: E731 — S falls as f rises
            return Interval(s(f_iv.estimate), s(f_iv.high), s(f_iv.low))

        add_fit("amdahl", fit_amdahl(g["world_size"], g[TIME]), amdahl_speedup)
        for _, r in sg[sg["world_size"] > 1].iterrows():
            e = karp_flatt([r["speedup"], r["speedup_ci_high"], r["speedup_ci_low"]], r["world_size"])
            add("karp_flatt", "e", kind="measured", iv=Interval(*map(float, e)), p=int(r["world_size"]), n=int(r["n_repeats"]),
                note="experimentally determined serial fraction")
        key = _baseline_key(info)  # strategies at the same settings share one baseline
        if key not in base_times:
            base_times[key] = _baseline_step_time(p1, info, baseline_strategy)
        step_base = base_times[key]
        def cost_speedup(fit, q):
            t = fit.predictions[q]  # predicted step time; speedup falls as it rises
            return Interval(step_base / t.estimate, step_base / t.high, step_base / t.low) if step_base else Interval(np.nan)

        add_fit("cost_model", fit_cost_model(g, sweep, predict_at=(2 * p_max, 4 * p_max), n_boot=n_boot), cost_speedup)
    return pd.DataFrame(rows).reindex(columns=[*FIT_COLUMNS[:1], *gcols, *FIT_COLUMNS[1:]])


# -- the baseline's runs --------------------------------------------------------------------


def baseline_runs(runs: pd.DataFrame, info: dict, baseline_strategy: str, ignore: tuple = ()) -> pd.DataFrame:
    """The baseline strategy's ok p = 1 runs with the settings `info` (strategy, the settings that
    cannot matter to it and `ignore` aside)."""
    ok = runs[(runs["status"] == "ok") & (numeric_column(runs, "world_size") == 1)]
    if "strategy" in ok:
        ok = ok[ok["strategy"].astype(str) == baseline_strategy]
    for c, v in _baseline_key(info, ignore):
        if c in ok:
            ok = ok[ok[c].astype(str) == v]
    return ok


def _baseline_key(info: dict, ignore: tuple = ()) -> tuple[tuple[str, str], ...]:
    """The settings of `info` that select its baseline's runs (as text, as the runs are matched)."""
    return tuple((c, str(v)) for c, v in info.items() if c not in ("strategy", *ignore, *IRRELEVANT_AT_BASELINE))


def _baseline_step_time(runs: pd.DataFrame, info: dict, baseline_strategy: str) -> float | None:
    """Median step time of the baseline strategy's p = 1 runs matching the group (strong scaling:
    same global batch, hence the same number of steps per epoch)."""
    ok = baseline_runs(runs, info, baseline_strategy)
    col = "step_time_mean_s" if "step_time_mean_s" in ok else "step_time_median_s"
    return float(ok[col].median()) if len(ok) else None
