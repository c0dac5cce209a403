"""The study presets' own report sections (issue 13): what a study asks, and its answer.

A preset names its study (`study: sync-dp` in configs/studies/sync-dp.yaml; the report gets
`--study sync-dp`). The report then opens, right after its findings, a section with the study's
question, a table computed for exactly that question, links to the figures that answer it and
a paragraph of findings computed from the data. Each study is one entry of STUDIES; a study
whose data are not in the runs (another grid under the same name) says so instead of guessing.

Numbers follow the report's conventions: timing metrics are the cells' geometric means with
their 95 % intervals (cells.csv), shares the medians over repeats with their order-statistic
intervals, per-step phase times the medians over a cell's runs of (phase seconds / timed steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.findings import num, pct_text, ratio_text, sig3, with_ci


@dataclass
class Data:
    """What a study reads: the report's runs, cells and speedup tables (and the per-step and
    profiler tables where the report has them)."""

    runs: pd.DataFrame
    cells: pd.DataFrame
    speed: pd.DataFrame
    steps: pd.DataFrame | None = None
    profile: pd.DataFrame | None = None


@dataclass
class Section:
    """A study's part of the report: the table as (columns, rows, note), the figure kinds it points
    to, and its findings (plain sentences)."""

    name: str
    title: str
    question: str
    columns: list[str]
    rows: list[list[str]]
    note: str
    figures: tuple[str, ...]
    findings: list[str]


@dataclass(frozen=True)
class Study:
    title: str
    question: str
    figures: tuple[str, ...]  # figure kinds (plots.KINDS) that answer it, in reading order
    build: Callable[[Data], tuple[list[str], list[list[str]], str, list[str]]]  # columns, rows, note, findings


def _num(x) -> float:
    v = pd.to_numeric(pd.Series([x]), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) else np.nan


def _ms(x) -> str:
    return num(1e3 * _num(x))


def _with_ci(r, col: str, scale: float = 1.0) -> str:
    """A cell's `col` with its interval, as the report's other tables write it (report.with_ci)."""
    return with_ci(*(_num(r.get(c, np.nan)) * scale for c in (col, f"{col}_ci_low", f"{col}_ci_high")))


def _per_step(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`): medians over its ok runs of compute and communication seconds per timed
    step, communication calls per step and samples per step (the global batch)."""
    ok = runs[runs["status"] == "ok"]
    num = lambda c: pd.to_numeric(ok[c], errors="coerce") if c in ok else pd.Series(np.nan, index=ok.index)  # noqa: E731
    steps = num("timed_steps")
    compute = sum(num(f"phase_{p}_s") for p in ("data", "forward", "backward", "optimizer")) / steps
    frame = pd.DataFrame({**{c: ok[c] for c in cols}, "compute_s": compute, "comm_s": num("phase_comm_s") / steps,
                          "calls": num("comm_calls_per_step"), "global_batch": num("global_batch"),
                          "fixed_s": num("fixed_cost_s"), "steps": num("total_steps")})  # fmt: skip
    return frame.groupby(cols, dropna=False, sort=True).median().reset_index()


def _comm_share(r) -> str:
    """A cell's share of a step spent communicating, with its interval (cells.csv's frac_comm)."""
    return pct_text(r["frac_comm"], r.get("frac_comm_ci_low"), r.get("frac_comm_ci_high"), r.get("frac_comm_ci_level"))


def _cells(d: Data, cols: list[str]) -> pd.DataFrame:
    """cells.csv rows with the per-step medians and the speedup beside them, one per cell."""
    cells = d.cells[d.cells["n_repeats"] > 0] if "n_repeats" in d.cells else d.cells
    merged = cells.merge(_per_step(d.runs, cols), on=cols, how="left", suffixes=("", "_runs"))
    sp = [c for c in ("speedup", "speedup_ci_low", "speedup_ci_high") if c in d.speed]
    if sp and not d.speed.empty:
        merged = merged.merge(d.speed[[*cols, *sp]], on=cols, how="left")
    return merged


def _name(r, cols: list[str]) -> str:
    return ", ".join(f"{'p' if c == 'world_size' else 'n' if c == 'dataset_size' else c}={r[c]}" for c in cols if c != "strategy")


# -- sync-dp: synchronous data parallelism, what communication costs ------------------------------


def sync_dp(d: Data):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]
    t = _cells(d, cols)
    columns = ["strategy", "cell", "iteration [ms]", "compute [ms]", "comm [ms]", "comm [% of step]", "calls/step",
               "calls/epoch", "compute : exp. comm", "epoch [s]", "speedup"]  # fmt: skip
    rows, found = [], []
    for _, r in t.sort_values(cols, kind="stable").iterrows():
        per_epoch = _num(r["calls"]) * _num(r.get("dataset_size")) / _num(r["global_batch"])
        rows.append([str(r["strategy"]), _name(r, cols), _with_ci(r, "step_time_median_s", 1e3), _ms(r["compute_s"]),
                     _ms(r["comm_s"]), _with_ci(r, "frac_comm", 100), num(_num(r["calls"])),
                     num(_num(per_epoch)), _with_ci(r, "compute_comm_ratio"),
                     _with_ci(r, "epoch_time_s"), _with_ci(r, "speedup")])  # fmt: skip
    multi = t[pd.to_numeric(t["world_size"], errors="coerce") > 1]
    if not multi.empty and "frac_comm" in multi:  # (runs without phase timings have no shares to compare)
        p = int(pd.to_numeric(multi["world_size"]).max())
        top = multi[pd.to_numeric(multi["world_size"]) == p].sort_values("frac_comm", ascending=False)
        parts = [f"{r['strategy']} {_comm_share(r)}"
                 f" ({num(_num(r['calls']))} calls per step)" for _, r in top.iterrows()]  # fmt: skip
        found.append(f"With {p} processes, the share of each step spent communicating: " + "; ".join(parts) + ".")
        by = {str(r["strategy"]): r for _, r in top.iterrows()}
        if "allreduce" in by and "bucketed_allreduce" in by:
            a, b = by["allreduce"], by["bucketed_allreduce"]
            found.append(f"Bucketing cuts the calls per step from {num(_num(a['calls']))} (per-parameter all-reduce) to "
                         f"{num(_num(b['calls']))}, and communication per step from {_ms(a['comm_s'])} to "
                         f"{_ms(b['comm_s'])} ms.")  # fmt: skip
        if "ddp" in by and np.isfinite(_num(by["ddp"].get("frac_exposed_comm"))):
            r = by["ddp"]
            found.append(f"DDP overlaps communication with the backward pass: of the {pct_text(r['frac_comm'])} of its "
                         f"step spent communicating, {pct_text(r['frac_exposed_comm'])} is exposed (not hidden)."
                         .replace(" (no interval)", ""))  # fmt: skip
        if "speedup" in top:
            best = top.dropna(subset=["speedup"]).sort_values("speedup", ascending=False)
            if not best.empty:
                r = best.iloc[0]
                found.append(f"The best effective speedup at p = {p} is {r['strategy']}'s: "
                             f"{ratio_text(r['speedup'], r.get('speedup_ci_low'), r.get('speedup_ci_high'))}.")  # fmt: skip
    note = ("Iteration, epoch time and speedup: geometric means over repeats [95 % intervals]; compute (data, forward, "
            "backward, optimizer) and communication (comm) per step, calls: medians over the cell's runs of the pacing rank's "
            "phase seconds per timed step; calls per epoch = calls per step × dataset size / global batch; compute : "
            "exposed (exp.) comm as in cells.csv.")  # fmt: skip
    return columns, rows, note, found


# -- dataset-size: when does parallelism pay off? --------------------------------------------------


def crossover_samples(fixed_1: float, per_sample_1: float, fixed_p: float, per_sample_p: float, epochs: float) -> float:
    """Samples N above which a run at p workers finishes first: a run takes fixed + epochs·N·(seconds
    per sample), so N* = (F_p − F_1) / (epochs · (s_1 − s_p)); 0 when p is never slower, inf when p
    is never faster, NaN when a number is missing."""
    vals = np.array([fixed_1, per_sample_1, fixed_p, per_sample_p, epochs], float)
    if not np.isfinite(vals).all():
        return np.nan
    gain = epochs * (per_sample_1 - per_sample_p)
    if gain <= 0:
        return np.inf if fixed_p >= fixed_1 or gain < 0 else 0.0
    return max(0.0, (fixed_p - fixed_1) / gain)


def _size_trends(t: pd.DataFrame) -> list[str]:
    """Per strategy and worker count: how the epoch time grows with the dataset size (against the
    data's own growth) and, for p > 1, the speedup and efficiency at each size."""
    found = []
    for (p, strategy), g in t.dropna(subset=["epoch_time_s"]).groupby(["_p", "strategy"], sort=True):
        g = g.sort_values("_n")
        if g["_n"].nunique() < 2:
            continue
        lo, hi = g.iloc[0], g.iloc[-1]
        text = (f"{strategy} at p = {int(p)}: epoch time {_with_ci(lo, 'epoch_time_s')} s at {sig3(lo['_n'])} samples → "
                f"{_with_ci(hi, 'epoch_time_s')} s at {sig3(hi['_n'])} (×{sig3(hi['epoch_time_s'] / lo['epoch_time_s'])} "
                f"for ×{sig3(hi['_n'] / lo['_n'])} the data)")  # fmt: skip
        if p > 1 and g["speedup"].notna().any():
            at = ", ".join(f"{_with_ci(r, 'speedup')} at {sig3(r['_n'])}" for _, r in g.iterrows())
            text += (f"; speedup {at}; efficiency {sig3(100 * lo['speedup'] / p)} % → "
                     f"{sig3(100 * hi['speedup'] / p)} %")  # fmt: skip
        found.append(text + ".")
    return found


def dataset_size(d: Data):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", "dataset_size", *A.varying(d.runs, A.axes(d.runs))))
            if c in d.cells]  # fmt: skip
    t = _cells(d, cols)
    t = t.assign(per_sample=pd.to_numeric(t["step_time_median_s"], errors="coerce") / t["global_batch"],
                 _p=pd.to_numeric(t["world_size"], errors="coerce"), _n=pd.to_numeric(t["dataset_size"], errors="coerce"))
    base = t[(t["strategy"].astype(str) == A.BASELINE_STRATEGY) & (t["_p"] == 1)]
    epochs = _num(d.runs["epochs"].median()) if "epochs" in d.runs else 1.0
    columns = ["strategy", "p", "dataset size", "epoch time [s]", "speedup", "ms per sample", "fixed cost per run [s]",
               "pays off above [samples]"]  # fmt: skip
    rows, found, crossings = [], [], {}
    b1 = (float(base["fixed_s"].median()), float(base["per_sample"].median())) if not base.empty else (np.nan, np.nan)
    for _, r in t.sort_values(["strategy", "_p", "_n"], kind="stable").iterrows():
        n_star = crossover_samples(*b1, _num(r["fixed_s"]), _num(r["per_sample"]), epochs) if r["_p"] > 1 else np.nan
        if r["_p"] > 1:
            crossings.setdefault((str(r["strategy"]), int(r["_p"])), []).append(n_star)
        rows.append([str(r["strategy"]), str(r["world_size"]), str(r["dataset_size"]), _with_ci(r, "epoch_time_s"),
                     _with_ci(r, "speedup"), _ms(r["per_sample"]), num(_num(r["fixed_s"])),
                     "never" if np.isinf(n_star) else num(n_star)])  # fmt: skip
    found += _size_trends(t)
    for (strategy, p), values in sorted(crossings.items(), key=lambda kv: kv[0][1]):
        known = np.array(values, float)[~np.isnan(np.array(values, float))]
        if not len(known):
            continue
        v = float(np.median(known))  # over the dataset sizes: each gives the crossing of its own cells
        if np.isinf(v):
            found.append(f"{strategy} at p = {p} never pays off here: its time per sample is no lower than one process's.")
        elif np.isfinite(v):
            sizes = sorted(t["_n"].dropna().unique())
            inside = "within" if sizes and sizes[0] <= v <= sizes[-1] else "outside"
            found.append(f"{strategy} at p = {p} pays off above about {sig3(v)} samples per run ({inside} the measured "
                         f"sizes {sig3(sizes[0])}–{sig3(sizes[-1])}): below it, its larger fixed cost per run "
                         f"outweighs its faster steps.")  # fmt: skip
    note = ("Epoch time and speedup: geometric means [95 % intervals]. A run's time = fixed cost + epochs × samples × "
            "seconds per sample (its timed steps' time per sample of the global batch); 'pays off above' is where "
            "that line crosses one process's (the single baseline's, medians over its dataset sizes): "
            "N* = (F_p − F_1) / (epochs · (s_1 − s_p)). The fitted T_p = T_comp/p + T_comm + T_sync per dataset size "
            "is the cost model in the fits table.")  # fmt: skip
    return columns, rows, note, found


# -- sync-strategies: which strategy, and where its time goes -------------------------------------

LOSS_AT = (20, 40)  # iterations whose loss the study compares (steps.csv's step numbers)


def _steps_by_cell(d: Data, cols: list[str]) -> pd.DataFrame:
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


def _curves_text(curves: dict[tuple, pd.Series], t: pd.DataFrame, cols: list[str], norms: pd.Series | None = None) -> str:
    """Whether the cells' loss curves are one model's, and if they part, where and why: an
    unstable run (a loss spike) amplifies the last-bit differences between summation orders, and
    a steep fall spreads them; the final weights say whether the models still agree."""
    if len(curves) < 2:
        return "."
    one = t[pd.to_numeric(t["world_size"], errors="coerce") == 1]
    ref_row = one.iloc[0] if not one.empty else t.iloc[0]
    ref_key = tuple(ref_row[c] for c in cols)
    ref = curves.get(ref_key, next(iter(curves.values())))
    ref_name = f"{ref_row['strategy']} ({_name(ref_row, cols)})"
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
    spread = (norms.max() - norms.min()) / norms.median() if norms is not None and len(norms) > 1 else np.nan
    if spread <= WEIGHTS_AGREE:
        gaps = pd.concat({k: (c - ref).abs() for k, c in curves.items() if k != ref_key}, axis=1).max(axis=1)
        digits = max(6, int(np.ceil(-np.log10(spread))) + 2) if spread > 0 else 6  # enough to show the spread
        return (text + f", by at most {sig3(100 * gaps.max() / ref.iloc[0])} % of the first loss (iteration "
                f"{int(gaps.idxmax())}), while their final weights' norms agree to a relative {spread:.1g} "
                f"({norms.min():.{digits}g}–{norms.max():.{digits}g}): one model, its "
                "curves spread by the rounding of different summation orders while the loss falls steeply.")  # fmt: skip
    return text + ": the strategies do not all train the same model (an approximate one, or other batches)."


def sync_strategies(d: Data):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]
    steps = _steps_by_cell(d, cols)
    t = _cells(d, cols).merge(_rank_and_loss(steps, cols), on=cols, how="left")
    if d.profile is not None and not d.profile.empty:
        pcols = [c for c in cols if c in d.profile]
        shares = {tuple(str(r[c]) for c in pcols): r["comm_share"]
                  for _, r in A.profile_comm_shares(d.profile, pcols).iterrows()}  # fmt: skip
        t["profile_comm"] = [shares.get(tuple(str(r[c]) for c in pcols), np.nan) for _, r in t.iterrows()]
    columns = ["strategy", "cell", "iteration [ms]", "rank 0 [ms]", "slowest other rank [ms]", "rank skew",
               *(f"loss at {i}" for i in LOSS_AT), "test accuracy", "profiled comm [% of step]", "throughput [samples/s]",
               "speedup"]  # fmt: skip
    rows, found = [], []
    for _, r in t.sort_values(cols, kind="stable").iterrows():
        rows.append([str(r["strategy"]), _name(r, cols), _with_ci(r, "step_time_median_s", 1e3), _ms(r.get("rank0_s")),
                     _ms(r.get("others_s")), _with_ci(r, "rank_skew"),
                     *(num(_num(r.get(f"loss_{i}"))) for i in LOSS_AT), _with_ci(r, "test_acc", 100),
                     num(100 * _num(r.get("profile_comm"))),
                     _with_ci(r, "samples_per_s"), _with_ci(r, "speedup")])  # fmt: skip
    multi = t[pd.to_numeric(t["world_size"], errors="coerce") > 1]
    if not multi.empty and "samples_per_s" in multi:
        best = multi.sort_values("samples_per_s", ascending=False).iloc[0]
        found.append(f"The fastest strategy here is {best['strategy']} ({_name(best, cols)}): "
                     f"{_with_ci(best, 'samples_per_s')} samples/s, speedup {_with_ci(best, 'speedup')} over one process.")  # fmt: skip
    gs = multi[multi["strategy"].astype(str) == "gather_scatter"]
    for _, r in gs.iterrows():
        if np.isfinite(_num(r.get("rank0_s"))) and np.isfinite(_num(r.get("others_s"))):
            found.append(f"Gather/scatter's rank 0 gathers and scatters for everyone ({_name(r, cols)}): its step takes "
                         f"{_ms(r['rank0_s'])} ms against {_ms(r['others_s'])} ms on the slowest other rank, rank skew "
                         f"{_with_ci(r, 'rank_skew')}.")  # fmt: skip
    losses = t.dropna(subset=[f"loss_{LOSS_AT[-1]}"]) if f"loss_{LOSS_AT[-1]}" in t else t.iloc[0:0]
    if len(losses) > 1:
        lo, hi = losses[f"loss_{LOSS_AT[-1]}"].min(), losses[f"loss_{LOSS_AT[-1]}"].max()
        found.append(f"At iteration {LOSS_AT[-1]} the loss ranges from {sig3(lo)} to {sig3(hi)} over the cells "
                     f"(the global batch's, median over repeats)" + _curves_text(_loss_curves(steps, cols), t, cols, _norms(d.runs, cols)))  # fmt: skip
    note = ("Iteration time, throughput, speedup: geometric means [95 % intervals]; rank 0 and the slowest other rank: "
            "medians over runs of each rank's median timed step (steps.csv); loss at an iteration: the global batch's at that step "
            "of steps.csv (the ranks' losses weighted by their samples), median over runs; test accuracy and rank skew: medians [order-statistic intervals]; profiled "
            "comm: communication operators' share of a profiled step (the profile figure).")  # fmt: skip
    return columns, rows, note, found


# -- cores-and-gpus: how many processes or GPUs, per batch size ---------------------------------------


def _out_of_memory(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell: runs that ran out of memory (diagnosed failure kind oom) and runs in all."""
    oom = runs.get("failure_kind", pd.Series("", index=runs.index)).astype(str).eq("oom")
    frame = runs[cols].assign(_oom=oom.to_numpy(), _n=1)
    return frame.groupby(cols, dropna=False, sort=False)[["_oom", "_n"]].sum().reset_index()


def _skipped_counts(runs: pd.DataFrame, device, ran: set[int]) -> tuple[list[int], int, str]:
    """The worker counts of `device` the grid asked for that never ran (recorded as skipped): the
    counts, how many runs, and the first run's reason (e.g. NCCL's one GPU per rank)."""
    gone = runs[(runs["status"] == "skipped") & (runs["device"].astype(str) == str(device))]
    p = pd.to_numeric(gone["world_size"], errors="coerce")
    keep = p.notna() & ~p.isin(ran)
    reason = gone.loc[keep, "reason"].astype(str).iloc[0] if keep.any() else ""
    return sorted(set(p[keep].astype(int))), int(keep.sum()), reason


def _devices_not_run(runs: pd.DataFrame, ran: list[str]) -> list[str]:
    """One answer per device of the grid on which nothing ran, with the recorded reason."""
    found = []
    for device in sorted(set(runs["device"].astype(str)) - set(ran)):
        _, n, reason = _skipped_counts(runs, device, set())
        if n:
            found.append(f"Nothing ran on {device} here: its {n} runs were recorded as skipped "
                         f"({reason}); the answers below are the other device's.")  # fmt: skip
    return found


def _oversubscribed(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell: whether any of its runs had more ranks than the machine's cores (flagged per run)."""
    flag = runs.get("extra_oversubscribed", pd.Series(False, index=runs.index)).map(A.truthy)
    frame = runs[cols].assign(_over=flag.to_numpy())
    return frame.groupby(cols, dropna=False, sort=False)["_over"].any().reset_index()


def _scaling_text(g: pd.DataFrame, unit: str) -> str:
    """Throughput against the worker count of one device and batch, with the speedup and the
    communication share at each count, and where adding workers stops paying."""
    g = g.sort_values("_p")
    parts = []
    for _, r in g.iterrows():
        extra = [f"speedup {_with_ci(r, 'speedup')}"] if r["_p"] > 1 and np.isfinite(_num(r.get("speedup"))) else []
        if r["_p"] > 1 and np.isfinite(_num(r.get("frac_comm"))):
            extra.append(f"{_comm_share(r)}"
                         " of a step communicating")  # fmt: skip
        if r.get("_over"):
            extra.append("oversubscribed")
        parts.append(f"{int(r['_p'])} → {_with_ci(r, 'samples_per_s')} samples/s" + (f" ({', '.join(extra)})" if extra else ""))
    peak = g.sort_values("samples_per_s", ascending=False).iloc[0]
    after = g[g["_p"] > peak["_p"]]
    tail = (f"; beyond {int(peak['_p'])} {unit} throughput falls" if not after.empty and
            after["samples_per_s"].max() < peak["samples_per_s"] else "")  # fmt: skip
    return "; ".join(parts) + tail


_ONE = {"GPUs": "GPU", "processes": "process"}


def _counts_not_run(runs: pd.DataFrame, device, ran: int, unit: str) -> str:
    counts, _, reason = _skipped_counts(runs, device, {ran})
    return f" (the {' and '.join(map(str, counts))}-{_ONE[unit]} cells were skipped: {reason})" if counts else ""


def _batch_text(g: pd.DataFrame) -> str:
    """Throughput per batch size of one worker count, and whether it keeps rising with the batch."""
    g = g.sort_values("_b")
    text = ", ".join(f"batch {int(r['_b'])} → {_with_ci(r, 'samples_per_s')}" for _, r in g.iterrows()) + " samples/s"
    if len(g) > 1:
        top = g.sort_values("samples_per_s").iloc[-1]
        rises = top["_b"] == g["_b"].max()
        text += "; it rises to the largest batch" if rises else f"; it peaks at batch {int(top['_b'])}"
    return text


def cores_and_gpus(d: Data):
    cols = [c for c in dict.fromkeys(("device", "strategy", "world_size", "batch_size",
                                      *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]  # fmt: skip
    t = _cells(d, cols)
    t = t.merge(_out_of_memory(d.runs, cols), on=cols, how="outer") if "device" in cols else t.assign(_oom=0, _n=0)
    t = t.merge(_oversubscribed(d.runs, cols), on=cols, how="left")
    t = t.assign(_p=pd.to_numeric(t["world_size"], errors="coerce"), _b=pd.to_numeric(t["batch_size"], errors="coerce"))
    columns = ["device", "batch", "processes / GPUs", "strategy", "throughput [samples/s]", "speedup", "comm [% of step]",
               "out of memory", "best for its batch"]  # fmt: skip
    best = {}
    for key, g in t.dropna(subset=["samples_per_s"]).groupby(["device", "_b"], dropna=False, sort=True):
        top = g.sort_values("samples_per_s", ascending=False).iloc[0]
        best[key] = top
    rows, found = [], []
    for _, r in t.sort_values(["device", "_b", "_p"], kind="stable").iterrows():
        top = best.get((r["device"], r["_b"]))
        is_best = top is not None and top["_p"] == r["_p"] and str(top["strategy"]) == str(r["strategy"])
        oom = f"{int(r['_oom'])} of {int(r['_n'])} runs" if _num(r.get("_oom")) > 0 else ""
        comm = _with_ci(r, "frac_comm", 100) if r["_p"] > 1 and np.isfinite(_num(r.get("frac_comm"))) else ""
        rows.append([str(r["device"]), str(r["batch_size"]), str(r["world_size"]) + (" (oversubscribed)" if r.get("_over") else ""),
                     str(r["strategy"]), _with_ci(r, "samples_per_s"), _with_ci(r, "speedup"), comm, oom,
                     "best" if is_best else ""])  # fmt: skip
    found += _devices_not_run(d.runs, sorted({str(k[0]) for k in best}))
    ran = t.dropna(subset=["samples_per_s"])
    for device in sorted({k[0] for k in best}, key=str):
        unit = "GPUs" if str(device) == "cuda" else "processes"
        mine = ran[ran["device"] == device]
        if mine["_p"].nunique() == 1:  # one count (e.g. one GPU): no best count to name, but the batch still tells
            p = int(mine["_p"].iloc[0])
            found.append(f"On {device} only {p} {unit if p > 1 else _ONE[unit]} ran"
                         f"{_counts_not_run(d.runs, device, p, unit)}; throughput against the batch: "
                         f"{_batch_text(mine)}.")  # fmt: skip
            continue
        per = [f"batch {int(b)}: {int(top['_p'])} ({_with_ci(top, 'samples_per_s')} samples/s)"
               for (dev, b), top in best.items() if dev == device]  # fmt: skip
        found.append(f"On {device}, the number of {unit} with the highest throughput, per batch size: " + "; ".join(per) + ".")
        for b, g in mine.groupby("_b", sort=True):
            if g["_p"].nunique() > 1:
                found.append(f"On {device} at batch {int(b)}, throughput against {unit}: {_scaling_text(g, unit)}.")
    ooms = t[t["_oom"] > 0]
    if not ooms.empty:
        named = "; ".join(f"batch {r['batch_size']} at {r['world_size']} on {r['device']} ({int(r['_oom'])} of {int(r['_n'])} runs)"
                          for _, r in ooms.sort_values(["device", "_b", "_p"]).iterrows())  # fmt: skip
        found.append(f"Out of memory, recorded and the grid went on: {named}.")
    note = ("Throughput and speedup: geometric means over repeats [95 % intervals]; 'best for its batch': the cell with "
            "the highest throughput estimate for its device and batch size (the intervals say whether its lead is "
            "clear); comm: the share of a step spent communicating (the phases figure splits it); oversubscribed: more "
            "ranks than the machine's cores; out of memory: runs whose failure was diagnosed as oom (the failed-runs "
            "table has each reason).")  # fmt: skip
    return columns, rows, note, found


# -- accelerators: what a GPU changes for the same workload -----------------------------------------


def _memory(r) -> tuple[str, str]:
    """A cell's peak memory and what it is: CUDA allocated on a GPU, the ranks' largest RSS on CPU."""
    cuda = str(r.get("device")) == "cuda" and np.isfinite(_num(r.get("cuda_max_allocated_mb")))
    col = "cuda_max_allocated_mb" if cuda else "peak_rss_mb"
    return _with_ci(r, col), "GPU" if cuda else "RSS"


def _epochs_text(values: list, shown: int = 4) -> str:
    """Throughput per epoch, first to last; more than `shown` epochs: the first two, an ellipsis, the
    last, and how many (the epoch_throughput figure draws them all)."""
    if len(values) <= shown:
        return " → ".join(num(v) for v in values) or "–"
    return " → ".join([num(values[0]), num(values[1]), "…", num(values[-1])]) + f" ({len(values)} epochs)"


def accelerators(d: Data):
    cols = [c for c in dict.fromkeys(("device", "model", "strategy", "world_size", "batch_size", "num_workers",
                                      *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]  # fmt: skip
    t = _cells(d, cols).merge(A.round_time(d.runs, cols), on=cols, how="left")
    t = t.merge(A.auto_batch(d.runs, cols)[[*cols, "chosen", "method"]], on=cols, how="left")
    per_epoch = A.epoch_throughput(d.runs, d.steps, cols) if d.steps is not None else pd.DataFrame(columns=[*cols, "epoch"])
    epochs = {tuple(map(str, k)): g.sort_values("epoch")["samples_per_s"].tolist()
              for k, g in per_epoch.groupby(cols, dropna=False, sort=False)} if not per_epoch.empty else {}  # fmt: skip
    t = t.assign(_p=pd.to_numeric(t["world_size"], errors="coerce"), _key=[tuple(map(str, k)) for k in t[cols].itertuples(index=False)])
    columns = ["device", "model", "strategy", "p", "batch", "workers", "throughput [samples/s]", "per epoch [samples/s]",
               "epoch [s]", "round [ms]", "peak memory [MB]", "test accuracy [%]", "speedup"]  # fmt: skip
    rows = []
    order = ["device", "model", "_p", "strategy", "batch_size", "num_workers"]
    for _, r in t.sort_values([c for c in order if c in t], kind="stable", key=lambda s: s.astype(str)).iterrows():
        batch = str(r["batch_size"]) + (f" → {num(_num(r['chosen']))}" if np.isfinite(_num(r.get("chosen"))) else "")
        mem, what = _memory(r)
        rows.append([str(r["device"]), str(r.get("model", "")), str(r["strategy"]), str(r["world_size"]), batch,
                     str(r.get("num_workers", "")), _with_ci(r, "samples_per_s"),
                     _epochs_text(epochs.get(r["_key"], [])), _with_ci(r, "epoch_time_s"),
                     _ms(r.get("round_s")), f"{mem} ({what})" if mem != "–" else mem, _with_ci(r, "test_acc", 100),
                     _with_ci(r, "speedup")])  # fmt: skip
    found = _accelerator_findings(d, t, per_epoch, cols)
    note = ("Throughput, epoch time, speedup: geometric means over repeats [95 % intervals]; per epoch: each epoch's global "
            "samples over its steps' time (the slowest rank's per step; the first epoch holds the warm-up steps), medians "
            "over repeats; round: local SGD's local steps and their averaging (extra.round_time_s), one step for the "
            "other strategies, medians; batch 'auto → N': the per-rank batch it chose; peak memory: CUDA allocated on a "
            "GPU (GPU), the largest rank's resident set on CPU (RSS), medians [order-statistic intervals]; test accuracy: "
            "medians.")  # fmt: skip
    return columns, rows, note, found


def _after_steps(r) -> str:
    """' after N steps of B samples', where the run recorded them (accuracy depends on both)."""
    steps, batch = _num(r.get("steps")), _num(r.get("global_batch"))
    return f" after {int(steps)} steps of {int(batch)}" if np.isfinite(steps) and np.isfinite(batch) else ""


def _accelerator_findings(d: Data, t: pd.DataFrame, per_epoch: pd.DataFrame, cols: list[str]) -> list[str]:
    ran = t.dropna(subset=["samples_per_s"])
    devices = sorted(ran["device"].astype(str).unique())
    found = _devices_not_run(d.runs, devices)
    # the same cell on each device
    if len(devices) > 1:
        keys = [c for c in cols if c != "device"]
        both = ran.pivot_table(index=keys, columns="device", values="samples_per_s", aggfunc="first").dropna()
        if not both.empty and {"cpu", "cuda"} <= set(both.columns):
            ratio = both["cuda"] / both["cpu"]
            found.append(f"On the same cells, the GPU's throughput is {sig3(ratio.median())}× the CPU's (median over "
                         f"{len(ratio)} cells; {sig3(ratio.min())}–{sig3(ratio.max())}×).")  # fmt: skip
    # the first epoch against the later ones
    if not per_epoch.empty and per_epoch["epoch"].nunique() > 1:
        first = per_epoch[per_epoch["epoch"] == per_epoch["epoch"].min()].set_index(cols)["samples_per_s"]
        later = per_epoch[per_epoch["epoch"] > per_epoch["epoch"].min()].groupby(cols, dropna=False)["samples_per_s"].median()
        share = (first / later).dropna()
        for device, s in share.groupby(level="device"):
            found.append(f"On {device}, the first epoch (with the warm-up steps) runs at {sig3(100 * s.median())} % of the later "
                         f"epochs' throughput (median over {len(s)} cells).")  # fmt: skip
    # batch auto: what it chose, at what memory, against the static batch
    for _, r in ran[np.isfinite(pd.to_numeric(ran["chosen"], errors="coerce"))].iterrows():
        mem, what = _memory(r)
        static = A.matching(ran, dict(device=r["device"], model=r.get("model"), strategy=r["strategy"],
                                      world_size=r["world_size"], num_workers=r.get("num_workers")))  # fmt: skip
        static = static[pd.to_numeric(static["batch_size"], errors="coerce").notna()]
        vs = ""
        if not static.empty:
            top = static.sort_values("samples_per_s", ascending=False).iloc[0]
            vs = (f"; the best static batch ({top['batch_size']}) reaches {_with_ci(top, 'samples_per_s')} samples/s, "
                  f"auto {_with_ci(r, 'samples_per_s')}")  # fmt: skip
        found.append(f"batch_size auto on {r['device']} ({r.get('model')}) chose {num(_num(r['chosen']))} samples per rank "
                     f"({r.get('method')}), peak memory {mem} MB ({what}){vs}.")  # fmt: skip
    # batch x DataLoader workers (one process)
    sweep = ran[(ran["_p"] == 1) & pd.to_numeric(ran["batch_size"], errors="coerce").notna()]
    if "num_workers" in sweep and sweep["num_workers"].astype(str).nunique() > 1:
        for (device, model), g in sweep.groupby(["device", "model"], sort=True):
            if g["num_workers"].astype(str).nunique() < 2:  # no sweep for this model (ResNet-18's CPU cells)
                continue
            top = g.sort_values("samples_per_s", ascending=False).iloc[0]
            w = g.pivot_table(index="batch_size", columns="num_workers", values="samples_per_s", aggfunc="first")
            lo, hi = w.columns.min(), w.columns.max()
            gain = (w[hi] / w[lo]).dropna()
            found.append(f"On {device} ({model}), the batch × DataLoader-workers sweep peaks at batch {top['batch_size']} with "
                         f"{top['num_workers']} workers ({_with_ci(top, 'samples_per_s')} samples/s); {hi} workers instead of "
                         f"{lo} change throughput by {'+' if gain.median() >= 1 else ''}{sig3(100 * (gain.median() - 1))} % (median over {len(gain)} batch "
                         f"sizes).")  # fmt: skip
    # the strategies, per device and model, at their common batch and world size
    multi = ran[ran["_p"] > 1]
    for (device, model), g in multi.groupby(["device", "model"], sort=True):
        p = int(g["_p"].min())
        at = g[g["_p"] == p]
        base = A.matching(ran, dict(device=device, model=model, strategy=A.BASELINE_STRATEGY))
        base = base[base["batch_size"].astype(str).isin(at["batch_size"].astype(str)) &
                    base["num_workers"].astype(str).isin(at["num_workers"].astype(str))] if "num_workers" in base else base  # fmt: skip
        both = pd.concat([base, at])
        parts = [f"{r['strategy']} {_ms(r['round_s'])} ms a round, {_with_ci(r, 'samples_per_s')} samples/s, accuracy "
                 f"{_with_ci(r, 'test_acc', 100)} %{_after_steps(r)}" for _, r in both.iterrows()]  # fmt: skip
        fastest = at.sort_values("samples_per_s", ascending=False).iloc[0]
        fewer = ""
        if both["steps"].nunique() > 1 and both["test_acc"].nunique() > 1:  # weak scaling: fewer, larger steps
            fewer = (" The accuracies come after different numbers of optimizer steps (the same epochs in steps of "
                     f"{p}× the samples), so they compare training budgets, not the strategies' maths.")  # fmt: skip
        found.append(f"On {device} ({model}), one process against {p} (per-rank batch {fastest['batch_size']}): "
                     + "; ".join(parts) + f". Fastest at p = {p}: {fastest['strategy']}." + fewer)  # fmt: skip
    for device in devices:  # e.g. one GPU: NCCL wants a GPU per rank, so no strategy ran at p > 1
        counts, n, reason = _skipped_counts(d.runs, device, set(multi[multi["device"].astype(str) == device]["_p"]))
        if counts and n:
            found.append(f"On {device} the strategies at p = {', '.join(map(str, counts))} did not run: their {n} runs "
                         f"were recorded as skipped ({reason}).")  # fmt: skip
    # CPU epoch time against processes (DDP)
    ddp = A.matching(ran, dict(device="cpu", strategy="ddp"))
    for model, g in ddp.groupby("model", sort=True) if "model" in ddp else []:
        one = A.matching(ran, dict(device="cpu", model=model, strategy=A.BASELINE_STRATEGY))
        one = one[one["batch_size"].astype(str).isin(g["batch_size"].astype(str))]
        if "num_workers" in one:
            one = one[one["num_workers"].astype(str).isin(g["num_workers"].astype(str))]
        series = [f"{_with_ci(r, 'epoch_time_s')} s at {int(r['_p'])}" for _, r in pd.concat([one, g]).sort_values("_p").iterrows()]
        found.append(f"On CPU ({model}), the epoch time against processes (one process, then DDP): " + ", ".join(series) + ".")
    return found


STUDIES: dict[str, Study] = {
    "sync-dp": Study(
        "Synchronous data parallelism: what communication costs",
        "How much of each step do the synchronising strategies spend communicating, how many calls does it take, "
        "and what do bucketing and DDP's overlap buy?",
        ("phases", "speedup", "efficiency", "profile"),
        sync_dp,
    ),
    "dataset-size": Study(
        "Dataset size: when does parallelism pay off?",
        "How do training time, speedup and efficiency change with the dataset size, and above which size does "
        "adding workers pay off?",
        ("dataset_size", "speedup", "fixed_cost"),
        dataset_size,
    ),
    "cores-and-gpus": Study(
        "Cores and GPUs: how many, per batch size",
        "How does throughput grow with CPU processes and with GPUs, which count is best for each batch size, and "
        "which batch sizes do not fit?",
        ("phases", "throughput", "speedup", "throughput_vs_batch", "memory_vs_batch"),
        cores_and_gpus,
    ),
    "accelerators": Study(
        "Accelerators: what a GPU changes for the same workload",
        "How do throughput per epoch, the largest batch that fits and its memory, the DataLoader's workers, and "
        "single vs pipeline vs federated averaging vs DDP differ between CPU and GPU, and how does the CPU's epoch "
        "time fall with processes?",
        ("epoch_throughput", "memory_vs_batch", "throughput_vs_batch", "strategy_bars", "epoch_time"),
        accelerators,
    ),
    "sync-strategies": Study(
        "Sync strategies: which one, and where its time goes",
        "Which gradient-sync strategy trains fastest, what does rank 0's role in gather/scatter cost, do the "
        "strategies train the same model, and where does a step's time go by operator?",
        ("speedup", "rank_skew", "loss", "profile", "phases"),
        sync_strategies,
    ),
}


def section(name: str, runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame,
            steps: pd.DataFrame | None = None, profile: pd.DataFrame | None = None) -> Section:  # fmt: skip
    """The report section of study `name` (a KeyError names the studies there are)."""
    if name not in STUDIES:
        raise KeyError(f"unknown study {name!r}: one of {', '.join(sorted(STUDIES))}")
    study = STUDIES[name]
    columns, rows, note, found = study.build(Data(runs, cells, speed, steps, profile))
    return Section(name, study.title, study.question, columns, rows, note, study.figures, found)
