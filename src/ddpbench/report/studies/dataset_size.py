"""dataset-size: when does parallelism pay off? (configs/studies/dataset-size.yaml).

Per strategy, worker count and dataset size: epoch time, speedup, time per sample and the fixed
cost per run, and the dataset size above which more workers finish first (`crossover_samples`);
the answer follows the epoch time and speedup as the data grow.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.studies.common import Study, StudyData, cell_ci, ms_text, study_cells, to_float
from ddpbench.report.text import num, sig3


def crossover_samples(fixed_1: float, per_sample_1: float, fixed_p: float, per_sample_p: float, epochs: float) -> float:
    """Samples N above which a run at p workers finishes first: a run takes fixed + epochs·N·(seconds
    per sample), so N* = (F_p − F_1) / (epochs · (s_1 − s_p)); 0 when p is never slower, inf when p
    is never faster at large N, NaN when a number is missing (`payoff` gives the shape too)."""
    n, shape = payoff(fixed_1, per_sample_1, fixed_p, per_sample_p, epochs)
    return {"above": n, "always": 0.0, "never": np.inf, "below": np.inf}.get(shape, np.nan)


def payoff(fixed_1: float, per_sample_1: float, fixed_p: float, per_sample_p: float, epochs: float) -> tuple[float, str]:
    """(N*, shape): where the run-time lines of p workers and of one process cross, and on which side
    p finishes first: "above" N* (faster steps, a larger fixed cost), "below" N* (slower steps, a
    smaller fixed cost: cheaper to start, so it wins small runs only), "always", "never"; (NaN, "")
    when a number is missing."""
    vals = np.array([fixed_1, per_sample_1, fixed_p, per_sample_p, epochs], float)
    if not np.isfinite(vals).all():
        return np.nan, ""
    gain = epochs * (per_sample_1 - per_sample_p)  # seconds p saves per sample of the dataset
    extra = fixed_p - fixed_1  # seconds p costs more per run
    if gain > 0:
        return (0.0, "always") if extra <= 0 else (extra / gain, "above")
    if gain < 0 and extra < 0:
        return extra / gain, "below"
    return (np.nan, "always") if gain == 0 and extra < 0 else (np.nan, "never")


def payoff_text(n: float, shape: str) -> str:
    """The table's cell: 'above 4,000', 'below 800', 'always', 'never' ('–' without numbers)."""
    return {"above": f"above {num(n)}", "below": f"below {num(n)}"}.get(shape, shape or "–")


def _size_trends(t: pd.DataFrame) -> list[str]:
    """Per strategy and worker count: how the epoch time grows with the dataset size (against the
    data's own growth) and, for p > 1, the speedup and efficiency at each size."""
    found = []
    for (p, strategy), g in t.dropna(subset=["epoch_time_s"]).groupby(["_p", "strategy"], sort=True):
        g = g.sort_values("_n")
        if g["_n"].nunique() < 2:
            continue
        lo, hi = g.iloc[0], g.iloc[-1]
        text = (f"{strategy} at p = {int(p)}: epoch time {cell_ci(lo, 'epoch_time_s')} s at {sig3(lo['_n'])} samples → "
                f"{cell_ci(hi, 'epoch_time_s')} s at {sig3(hi['_n'])} (×{sig3(hi['epoch_time_s'] / lo['epoch_time_s'])} "
                f"for ×{sig3(hi['_n'] / lo['_n'])} the data)")  # fmt: skip
        if p > 1 and g["speedup"].notna().any():
            at = ", ".join(f"{cell_ci(r, 'speedup')} at {sig3(r['_n'])}" for _, r in g.iterrows())
            text += (f"; speedup {at}; efficiency {sig3(100 * lo['speedup'] / p)} % → "
                     f"{sig3(100 * hi['speedup'] / p)} %")  # fmt: skip
        found.append(text + ".")
    return found


BOOTSTRAP = 2000  # resamples of the runs behind a crossing


def _per_run(runs: pd.DataFrame, other: list[str]) -> pd.DataFrame:
    """Each ok run's strategy, p, other axes, fixed cost per run and seconds per sample."""
    ok = runs[runs["status"].astype(str) == "ok"] if "status" in runs else runs
    col = lambda c: pd.to_numeric(ok[c], errors="coerce") if c in ok else pd.Series(np.nan, index=ok.index)  # noqa: E731
    frame = pd.DataFrame({"strategy": ok["strategy"].astype(str), "_p": col("world_size"),
                          **{c: ok[c].astype(str) for c in other},
                          "fixed_s": col("fixed_cost_s"), "per_sample": col("step_time_median_s") / col("global_batch")})  # fmt: skip
    return frame.dropna(subset=["fixed_s", "per_sample"])


def _payoff_interval(per_run: pd.DataFrame, strategy: str, p: int, key: tuple, other: list[str], epochs: float,
                     shape: str, seed: int = 0) -> tuple[float, float, float]:  # fmt: skip
    """A percentile bootstrap over runs of the crossing N* of (strategy, p) against one process within the
    group `key` of the other axes: both sides' runs resampled, their medians' crossing recomputed.
    (low, high, share of resamples on the other side of the crossing or with none); NaN with < 2 runs a side."""
    same = np.ones(len(per_run), bool)
    for c, v in zip(other, key):
        same &= per_run[c].to_numpy() == v
    mine = per_run[same & (per_run["strategy"].to_numpy() == strategy) & (per_run["_p"].to_numpy() == p)]
    base = per_run[same & (per_run["strategy"].to_numpy() == A.BASELINE_STRATEGY) & (per_run["_p"].to_numpy() == 1)]
    if len(mine) < 2 or len(base) < 2:
        return np.nan, np.nan, np.nan
    rng = np.random.default_rng(seed)
    pick = lambda g: g.to_numpy()[rng.integers(0, len(g), (BOOTSTRAP, len(g)))]  # noqa: E731
    f_p, s_p = np.median(pick(mine["fixed_s"]), 1), np.median(pick(mine["per_sample"]), 1)
    f_1, s_1 = np.median(pick(base["fixed_s"]), 1), np.median(pick(base["per_sample"]), 1)
    draws = [payoff(*v, epochs) for v in zip(f_1, s_1, f_p, s_p)]
    same_side = np.array([n for n, sh in draws if sh == shape], float)
    if len(same_side) < 2:
        return np.nan, np.nan, 1.0
    lo, hi = np.percentile(same_side, [2.5, 97.5])
    return float(lo), float(hi), 1 - len(same_side) / BOOTSTRAP


def _interval_text(lo: float, hi: float, other_side: float) -> tuple[str, list[str]]:
    """('[2,900, 6,100] ', ['95 % bootstrap over runs', ...]): the interval and what to say of it."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "", ["no interval: fewer than 2 runs a side" if np.isnan(other_side) else "no interval: the resamples disagree"]
    notes = ["95 % bootstrap over runs"]
    if other_side > 0:
        notes.append(f"{sig3(100 * other_side)} % of resamples cross the other way or not at all")
    return f"[{sig3(lo)}, {sig3(hi)}] ", notes


def build(d: StudyData):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", "dataset_size", *A.varying(d.runs, A.axes(d.runs))))
            if c in d.cells]  # fmt: skip
    t = study_cells(d, cols)
    t = t.assign(per_sample=pd.to_numeric(t["step_time_median_s"], errors="coerce") / t["global_batch"],
                 _p=pd.to_numeric(t["world_size"], errors="coerce"), _n=pd.to_numeric(t["dataset_size"], errors="coerce"))
    base = t[(t["strategy"].astype(str) == A.BASELINE_STRATEGY) & (t["_p"] == 1)]
    epochs = to_float(d.runs["epochs"].median()) if "epochs" in d.runs else 1.0
    columns = ["strategy", "p", "dataset size", "epoch time [s]", "speedup", "ms per sample", "fixed cost per run [s]",
               "pays off [samples]"]  # fmt: skip
    rows, found, crossings = [], [], {}
    # Within each group of the other axes (model, batch, ...): its own one-process line, its own crossings.
    other = [c for c in cols if c not in ("strategy", "world_size", "dataset_size")]
    key_of = lambda r: tuple(str(r[c]) for c in other)  # noqa: E731
    groups = base.groupby(other, dropna=False, sort=False) if other else [((), base)]
    lines = {key_of(g.iloc[0]): (float(g["fixed_s"].median()), float(g["per_sample"].median())) for _, g in groups if len(g)}
    for _, r in t.sort_values(["strategy", "_p", "_n"], kind="stable").iterrows():
        b1 = lines.get(key_of(r), (np.nan, np.nan))
        n_star, shape = payoff(*b1, to_float(r["fixed_s"]), to_float(r["per_sample"]), epochs) if r["_p"] > 1 else (np.nan, "")
        if r["_p"] > 1 and shape:
            crossings.setdefault((str(r["strategy"]), int(r["_p"]), key_of(r)), []).append((n_star, shape))
        rows.append([str(r["strategy"]), str(r["world_size"]), str(r["dataset_size"]), cell_ci(r, "epoch_time_s"),
                     cell_ci(r, "speedup"), ms_text(r["per_sample"]), num(to_float(r["fixed_s"])),
                     payoff_text(n_star, shape) if r["_p"] > 1 else "–"])  # fmt: skip
    found += _size_trends(t)
    sizes = sorted(t["_n"].dropna().unique())
    per_run = _per_run(d.runs, other)
    for (strategy, p, key), values in sorted(crossings.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        who = f"{strategy} at p = {p}" + (f" ({', '.join(f'{c}={v}' for c, v in zip(other, key))})" if other else "")
        shapes = [shape for _, shape in values]
        shape = max(set(shapes), key=shapes.count)  # the shape most dataset sizes' cells give
        if len(set(shapes)) > 1:
            found.append(f"{who}: the dataset sizes disagree on when it pays off "
                         f"({', '.join(f'{shapes.count(x)} {x}' for x in sorted(set(shapes)))}): no single answer.")
            continue
        v = float(np.median([n for n, _ in values]))  # over the dataset sizes: each gives the crossing of its own cells
        within = "within" if sizes and sizes[0] <= v <= sizes[-1] else "outside"
        interval, notes = _interval_text(*_payoff_interval(per_run, strategy, p, key, other, epochs, shape))
        notes += [f"{within} the measured sizes {sig3(sizes[0])}–{sig3(sizes[-1])}"] if sizes else []
        measured = f"{interval}({'; '.join(notes)})"
        if shape == "never":
            found.append(f"{who} never pays off here: its time per sample is no lower than one "
                         f"process's, and its fixed cost per run no smaller.")  # fmt: skip
        elif shape == "always":
            found.append(f"{who} pays off at every dataset size: its time per sample and its fixed "
                         f"cost per run are no larger than one process's.")  # fmt: skip
        elif shape == "above":
            found.append(f"{who} pays off above about {sig3(v)} samples per run {measured}: below it, "
                         f"its larger fixed cost per run outweighs its faster steps.")  # fmt: skip
        else:
            found.append(f"{who} pays off only below about {sig3(v)} samples per run {measured}: it "
                         f"starts faster (a smaller fixed cost per run) but takes longer per sample, so above it one "
                         f"process finishes first.")  # fmt: skip
    note = ("Epoch time and speedup: geometric means [95 % intervals]. A run's time = fixed cost + epochs × samples × "
            "seconds per sample (its timed steps' time per sample of the global batch); 'pays off above' (or 'below', for a "
            "cheaper start but slower steps) is where that line crosses one process's "
            "(the single baseline's with the same other axes, medians over its dataset sizes; the answer's interval: "
            "a percentile bootstrap over both sides' runs): "
            "N* = (F_p − F_1) / (epochs · (s_1 − s_p)). The cost model T_p = T_comp/p + T_comm + T_sync per dataset size "
            "is in the fits table where a strategy ran at enough worker counts to fit it.")  # fmt: skip
    return columns, rows, note, found


STUDY = Study(
    "dataset-size",
    "Dataset size: when does parallelism pay off?",
    "How do training time, speedup and efficiency change with the dataset size, and above which size does "
    "adding workers pay off?",
    ("dataset_size", "speedup", "fixed_cost"),
    build,
)
