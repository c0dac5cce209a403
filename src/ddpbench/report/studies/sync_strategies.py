"""sync-strategies: which strategy, and where its time goes (configs/studies/sync-strategies.yaml).

Per strategy and cell: iteration time, rank 0's and the slowest other rank's step (gather/scatter's
root works for everyone), the global batch's loss at fixed iterations, test accuracy, the profiled
communication share, throughput and speedup; the answer names the fastest strategy and says
whether the strategies train the same model (loss curves against one process's, `parting_step`,
and the final weights' norms).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.core.run_record import Extra
from ddpbench.report.studies.common import Study, StudyData, axes_text, cell_ci, ms_text, study_cells, to_float
from ddpbench.report.text import listing, num, sig3


LOSS_AT = (20, 40)  # iterations whose loss the study compares (steps.csv's step numbers)


def _steps_by_cell(d: StudyData, cols: list[str]) -> pd.DataFrame:
    """steps.csv rows with their cell's columns from runs.csv (steps.csv names only some axes;
    the run folder ties them: two cells differing by nodes alone are told apart)."""
    if d.steps is None or d.steps.empty or "run_dir" not in d.steps:
        return pd.DataFrame(columns=["run_dir", "rank", "step", "timed", "total_s", "loss", "samples", *cols])
    cells = d.runs[["run_dir", *cols]].drop_duplicates("run_dir")
    steps = d.steps[[c for c in ("run_dir", "rank", "step", "timed", "total_s", "loss", "samples") if c in d.steps]]
    return steps.merge(cells, on="run_dir", how="inner")


def _rank_and_loss(steps: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell: rank 0's and the slowest other rank's median timed step (medians over runs), and
    the global batch's loss at each iteration of LOSS_AT (median over runs)."""
    out, curves = [], _loss_curves(steps, cols)
    for key, g in steps.groupby(cols, dropna=False, sort=False):
        timed = g[pd.to_numeric(g["timed"], errors="coerce") > 0]
        per = timed.groupby(["run_dir", "rank"])["total_s"].median().unstack("rank")
        row = dict(zip(cols, key))
        row["rank0_s"] = float(per[0].median()) if 0 in per else np.nan
        others = per.drop(columns=[0], errors="ignore")
        row["others_s"] = float(others.max(axis=1).median()) if others.shape[1] else np.nan
        curve = curves.get(key if isinstance(key, tuple) else (key,), pd.Series(dtype=float))
        for it in LOSS_AT:
            row[f"loss_{it}"] = float(curve.get(it, np.nan))
        out.append(row)
    return pd.DataFrame(out, columns=[*cols, "rank0_s", "others_s", *(f"loss_{i}" for i in LOSS_AT)])


AGREE = 1e-3  # relative loss difference below which two curves are the same model (summation order aside)
UNSTABLE = 1.5  # a loss this many times the first step's: the training diverged for a while
WEIGHTS_AGREE = 1e-4  # final weights' norms this close (relative spread): one model (the exact strategies' test bound)


def _batch_loss(steps: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """The global batch's loss at each step of each run: the ranks' losses weighted by their samples
    (a rank's own loss is its shard's, not comparable with one process's over the whole batch)."""
    s = steps.assign(loss=pd.to_numeric(steps["loss"], errors="coerce"),
                     w=pd.to_numeric(steps.get("samples", 1), errors="coerce")).dropna(subset=["loss", "w"])  # fmt: skip
    s = s.assign(lw=s["loss"] * s["w"])
    g = s.groupby(["run_dir", "step", *cols], dropna=False, sort=False)[["lw", "w"]].sum().reset_index()
    return g.assign(loss=g["lw"] / g["w"]).drop(columns=["lw", "w"])


def _loss_curves(steps: pd.DataFrame, cols: list[str]) -> dict[tuple, pd.Series]:
    """Per cell: the global batch's loss at each step, median over runs (exact strategies repeat it bit for bit)."""
    b = _batch_loss(steps, cols)
    return {key if isinstance(key, tuple) else (key,): g.groupby("step")["loss"].median().sort_index()
            for key, g in b.groupby(cols, dropna=False, sort=False)}  # fmt: skip


def parting_step(curve: pd.Series, ref: pd.Series, rel: float = AGREE) -> float:
    """The first step at which `curve` differs from `ref` by more than `rel` of ref's loss, or of
    its first loss where that is larger (nan: never): a loss near 0 magnifies rounding (at 0.02,
    VGG-11's exact strategies differ by 4 % with weights equal to 2e-6)."""
    both = pd.concat([curve, ref], axis=1, join="inner").dropna()
    scale = np.maximum(both.iloc[:, 1].abs(), abs(ref.dropna().iloc[0]) if ref.notna().any() else 0.0)
    off = (both.iloc[:, 0] - both.iloc[:, 1]).abs() > rel * scale
    return float(off.idxmax()) if off.any() else np.nan


def _norms(runs: pd.DataFrame, cols: list[str]) -> pd.Series:
    """Each cell's final weights' norm (param_norm), median over its ok runs."""
    ok = runs[runs["status"] == "ok"]
    if "param_norm" not in ok:
        return pd.Series(dtype=float)
    return pd.to_numeric(ok["param_norm"], errors="coerce").groupby([ok[c] for c in cols], dropna=False).median().dropna()


def _samples(runs: pd.DataFrame, cols: list[str]) -> dict[tuple, np.ndarray]:
    """Each cell's final parameter vector at the sampled coordinates (extra.param_sample), from its
    first ok run that recorded one (runs of a cell start from the same seed)."""
    if Extra.param_sample not in runs:
        return {}
    ok = runs[(runs["status"] == "ok") & runs[Extra.param_sample].notna()]
    out = {}
    for key, g in ok.groupby(cols, dropna=False, sort=False):
        try:
            out[A.cell_key(key if isinstance(key, tuple) else (key,))] = np.array(
                str(g[Extra.param_sample].iloc[0]).split(), float)  # fmt: skip
        except ValueError:
            continue
    return out


def _weights_distance(samples: dict[tuple, np.ndarray], ref_key: tuple) -> float:
    """The largest relative distance of a cell's sampled final weights from the reference cell's (NaN:
    fewer than two cells, or no reference, have a sample of the same size)."""
    ref = samples.get(A.cell_key(ref_key))
    if ref is None or len(samples) < 2 or not np.linalg.norm(ref):
        return np.nan
    others = [s for k, s in samples.items() if s is not ref and s.shape == ref.shape]
    return max((float(np.linalg.norm(s - ref) / np.linalg.norm(ref)) for s in others), default=np.nan)


def _curves_text(curves: dict[tuple, pd.Series], t: pd.DataFrame, cols: list[str], norms: pd.Series | None = None,
                 samples: dict[tuple, np.ndarray] | None = None) -> str:  # fmt: skip
    """Whether the cells' loss curves are one model's, and if they part, where and why: an
    unstable run (a loss spike) amplifies the last-bit differences between summation orders, and
    a steep fall spreads them; the final weights say whether the models still agree."""
    if len(curves) < 2:
        return "."
    one = t[pd.to_numeric(t["world_size"], errors="coerce") == 1]
    ref_row = one.iloc[0] if not one.empty else t.iloc[0]
    ref_key = tuple(ref_row[c] for c in cols)
    ref = curves.get(ref_key, next(iter(curves.values())))
    ref_name = f"{ref_row['strategy']} ({axes_text(ref_row, cols)})"
    apart = sorted({str(k[cols.index("strategy")]) for k, c in curves.items()
                    if k != ref_key and not c.index.intersection(ref.index).size})  # fmt: skip
    if apart:  # no step in common: nothing says whether they agree (issue 46, point 5)
        return (f"; {listing(apart)} share no iteration with {ref_name}'s loss curve, so whether the strategies "
                "train the same model cannot be told from the curves.")  # fmt: skip
    parts = {k: parting_step(c, ref) for k, c in curves.items() if k != ref_key}
    parted = {k: s for k, s in parts.items() if np.isfinite(s)}
    if not parted:
        return ": the strategies train the same model (their loss curves agree within 0.1 % at every step)."
    first = min(parted.values())
    who = ", ".join(sorted({str(k[cols.index("strategy")]) for k, s in parted.items() if s == first}))
    if first <= ref.index.min():
        return (f"; the loss curves differ from {ref_name}'s from the first iteration ({who}): the "
                "strategies do not all train the same model (an approximate one, or other batches).")  # fmt: skip
    text = (f"; the loss curves agree with {ref_name}'s within 0.1 % through iteration {int(first) - 1} "
            f"and part from iteration {int(first)} ({who} first)")  # fmt: skip
    if ref.max() > UNSTABLE * ref.iloc[0]:
        return (text + f"; the loss peaks at {sig3(ref.max())} at iteration {int(ref.idxmax())} ({sig3(ref.iloc[0])} at "
                "the first): training this unstable amplifies small differences, down to the last-bit ones between "
                "exact strategies' summation orders, so the later losses and accuracies differ by chance, not by "
                "strategy (compare them at a learning rate that trains stably).")  # fmt: skip
    distance = _weights_distance(samples or {}, ref_key)
    if np.isfinite(distance):  # the final weights themselves (sampled), not one number of them (issue 46, point 5)
        if distance <= WEIGHTS_AGREE:
            gaps = pd.concat({k: (c - ref).abs() for k, c in curves.items() if k != ref_key}, axis=1).max(axis=1)
            return (text + f", by at most {sig3(100 * gaps.max() / ref.iloc[0])} % of the first loss (iteration "
                    f"{int(gaps.idxmax())}), while their final weights agree to a relative {distance:.1g} (the "
                    f"parameter vectors at {len(next(iter(samples.values())))} sampled coordinates): one model, its "
                    "curves spread by the rounding of different summation orders while the loss falls steeply.")  # fmt: skip
        return (text + f"; their final weights differ by a relative {distance:.2g} (the parameter vectors at sampled "
                "coordinates): the strategies do not all train the same model (an approximate one, or other batches).")  # fmt: skip
    spread = (norms.max() - norms.min()) / norms.median() if norms is not None and len(norms) > 1 else np.nan
    if spread <= WEIGHTS_AGREE:
        gaps = pd.concat({k: (c - ref).abs() for k, c in curves.items() if k != ref_key}, axis=1).max(axis=1)
        digits = max(6, int(np.ceil(-np.log10(spread))) + 2) if spread > 0 else 6  # enough to show the spread
        return (text + f", by at most {sig3(100 * gaps.max() / ref.iloc[0])} % of the first loss (iteration "
                f"{int(gaps.idxmax())}), while their final weights' norms agree to a relative {spread:.1g} "
                f"({norms.min():.{digits}g}–{norms.max():.{digits}g}): one model, its "
                "curves spread by the rounding of different summation orders while the loss falls steeply.")  # fmt: skip
    return text + ": the strategies do not all train the same model (an approximate one, or other batches)."


def build(d: StudyData):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]
    steps = _steps_by_cell(d, cols)
    t = study_cells(d, cols).merge(_rank_and_loss(steps, cols), on=cols, how="left")
    if d.profile is not None and not d.profile.empty:
        pcols = [c for c in cols if c in d.profile]
        shares = {tuple(str(r[c]) for c in pcols): r["comm_share"]
                  for _, r in A.profile_comm_shares(d.profile, pcols).iterrows()}  # fmt: skip
        t["profile_comm"] = [shares.get(tuple(str(r[c]) for c in pcols), np.nan) for _, r in t.iterrows()]
    thr, unit = A.throughput_metric(t)  # tokens/s for token data
    columns = ["strategy", "cell", "iteration [ms]", "rank 0 [ms]", "slowest other rank [ms]", "rank skew",
               *(f"loss at {i}" for i in LOSS_AT), "test accuracy", "profiled comm [% of step]", f"throughput [{unit}]",
               "speedup"]  # fmt: skip
    rows, found = [], []
    for _, r in t.sort_values(cols, kind="stable").iterrows():
        rows.append([str(r["strategy"]), axes_text(r, cols), cell_ci(r, "step_time_median_s", 1e3), ms_text(r.get("rank0_s")),
                     ms_text(r.get("others_s")), cell_ci(r, "rank_skew"),
                     *(num(to_float(r.get(f"loss_{i}"))) for i in LOSS_AT), cell_ci(r, "test_acc", 100),
                     num(100 * to_float(r.get("profile_comm"))),
                     cell_ci(r, thr), cell_ci(r, "speedup")])  # fmt: skip
    multi = t[pd.to_numeric(t["world_size"], errors="coerce") > 1]
    if not multi.empty and thr in multi:
        best = multi.sort_values(thr, ascending=False).iloc[0]
        found.append(f"The fastest strategy here is {best['strategy']} ({axes_text(best, cols)}): "
                     f"{cell_ci(best, thr)} {unit}, speedup {cell_ci(best, 'speedup')} over one process.")  # fmt: skip
    gs = multi[multi["strategy"].astype(str) == "gather_scatter"]
    for _, r in gs.iterrows():
        if np.isfinite(to_float(r.get("rank0_s"))) and np.isfinite(to_float(r.get("others_s"))):
            found.append(f"Gather/scatter's rank 0 gathers and scatters for everyone ({axes_text(r, cols)}): its step takes "
                         f"{ms_text(r['rank0_s'])} ms against {ms_text(r['others_s'])} ms on the slowest other rank, rank skew "
                         f"{cell_ci(r, 'rank_skew')}.")  # fmt: skip
    losses = t.dropna(subset=[f"loss_{LOSS_AT[-1]}"]) if f"loss_{LOSS_AT[-1]}" in t else t.iloc[0:0]
    if len(losses) > 1:
        lo, hi = losses[f"loss_{LOSS_AT[-1]}"].min(), losses[f"loss_{LOSS_AT[-1]}"].max()
        found.append(f"At iteration {LOSS_AT[-1]} the loss ranges from {sig3(lo)} to {sig3(hi)} over the cells "
                     f"(the global batch's, median over repeats)" + _curves_text(_loss_curves(steps, cols), t, cols, _norms(d.runs, cols),
                                                                            _samples(d.runs, cols)))  # fmt: skip
    note = ("Iteration time, throughput, speedup: geometric means [95 % intervals]; rank 0 and the slowest other rank: "
            "medians over runs of each rank's median timed step (steps.csv); loss at an iteration: the global batch's at that step "
            "of steps.csv (the ranks' losses weighted by their samples), median over runs; test accuracy and rank skew: medians [order-statistic intervals]; profiled "
            "comm: communication operators' share of a profiled step (the profile figure).")  # fmt: skip
    return columns, rows, note, found


STUDY = Study(
    "sync-strategies",
    "Sync strategies: which one, and where its time goes",
    "Which gradient-sync strategy trains fastest, what does rank 0's role in gather/scatter cost, do the "
    "strategies train the same model, and where does a step's time go by operator?",
    ("speedup", "rank_skew", "loss", "profile", "phases"),
    build,
)
