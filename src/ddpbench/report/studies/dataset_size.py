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
    b1 = (float(base["fixed_s"].median()), float(base["per_sample"].median())) if not base.empty else (np.nan, np.nan)
    for _, r in t.sort_values(["strategy", "_p", "_n"], kind="stable").iterrows():
        n_star, shape = payoff(*b1, to_float(r["fixed_s"]), to_float(r["per_sample"]), epochs) if r["_p"] > 1 else (np.nan, "")
        if r["_p"] > 1 and shape:
            crossings.setdefault((str(r["strategy"]), int(r["_p"])), []).append((n_star, shape))
        rows.append([str(r["strategy"]), str(r["world_size"]), str(r["dataset_size"]), cell_ci(r, "epoch_time_s"),
                     cell_ci(r, "speedup"), ms_text(r["per_sample"]), num(to_float(r["fixed_s"])),
                     payoff_text(n_star, shape) if r["_p"] > 1 else "–"])  # fmt: skip
    found += _size_trends(t)
    sizes = sorted(t["_n"].dropna().unique())
    for (strategy, p), values in sorted(crossings.items(), key=lambda kv: kv[0][1]):
        shapes = [shape for _, shape in values]
        shape = max(set(shapes), key=shapes.count)  # the shape most dataset sizes' cells give
        if len(set(shapes)) > 1:
            found.append(f"{strategy} at p = {p}: the dataset sizes disagree on when it pays off "
                         f"({', '.join(f'{shapes.count(x)} {x}' for x in sorted(set(shapes)))}): no single answer.")
            continue
        v = float(np.median([n for n, _ in values]))  # over the dataset sizes: each gives the crossing of its own cells
        within = "within" if sizes and sizes[0] <= v <= sizes[-1] else "outside"
        measured = f"({within} the measured sizes {sig3(sizes[0])}–{sig3(sizes[-1])})" if sizes else ""
        if shape == "never":
            found.append(f"{strategy} at p = {p} never pays off here: its time per sample is no lower than one "
                         f"process's, and its fixed cost per run no smaller.")  # fmt: skip
        elif shape == "always":
            found.append(f"{strategy} at p = {p} pays off at every dataset size: its time per sample and its fixed "
                         f"cost per run are no larger than one process's.")  # fmt: skip
        elif shape == "above":
            found.append(f"{strategy} at p = {p} pays off above about {sig3(v)} samples per run {measured}: below it, "
                         f"its larger fixed cost per run outweighs its faster steps.")  # fmt: skip
        else:
            found.append(f"{strategy} at p = {p} pays off only below about {sig3(v)} samples per run {measured}: it "
                         f"starts faster (a smaller fixed cost per run) but takes longer per sample, so above it one "
                         f"process finishes first.")  # fmt: skip
    note = ("Epoch time and speedup: geometric means [95 % intervals]. A run's time = fixed cost + epochs × samples × "
            "seconds per sample (its timed steps' time per sample of the global batch); 'pays off above' (or 'below', for a "
            "cheaper start but slower steps) is where that line crosses one process's (the single baseline's, medians over its dataset sizes): "
            "N* = (F_p − F_1) / (epochs · (s_1 − s_p)). The fitted T_p = T_comp/p + T_comm + T_sync per dataset size "
            "is the cost model in the fits table.")  # fmt: skip
    return columns, rows, note, found


STUDY = Study(
    "dataset-size",
    "Dataset size: when does parallelism pay off?",
    "How do training time, speedup and efficiency change with the dataset size, and above which size does "
    "adding workers pay off?",
    ("dataset_size", "speedup", "fixed_cost"),
    build,
)
