"""How long should a run time its steps? (issue 73, item 3) From a main job's own runs: the noise
a run's throughput has from its steps (which a longer run averages out) against the noise between
runs (which it does not), and what a run costs besides its timed steps; then the time the design
would spend per decision at each timed length, relative to the length the job ran at.

    python benchmarks/run_length.py results/ [--lengths 0.25,0.5,1,2,5]

The model (a design needs runs in proportion to the variance of a run's log throughput, and each
costs its fixed part plus its timed seconds): var(t) = σ_between² + w / t, where w is the
within-run variance of the log mean step time per second timed (each run's step times, the
slowest rank's each step, their variance over the steps divided by the steps and the squared
mean, times (1 + ρ) / (1 − ρ) for the steps' lag-1 autocorrelation ρ, times the seconds timed;
the median over runs), and σ_between² the spread of a cell's runs' log throughput beyond w / t
(pooled over cells, floored at 0: it holds the rounds' effects too, which the design pays
alike); time per decision ∝ var(t) · (fixed + t), fixed the median of a run's launcher wall less
its timed steps. Warm-up steps are in the fixed part: the length asked is `min_timed_s`.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
import pandas as pd


def tables(folder: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv (ok runs) and steps.csv (timed steps) of a results folder; SystemExit naming what is missing."""
    agg = pathlib.Path(folder) / "aggregate"
    for name in ("runs.csv", "steps.csv"):
        if not (agg / name).is_file():
            sys.exit(f"run_length: no {name} in {agg} (a results folder from `bash scripts/main.sh`)")
    runs, steps = pd.read_csv(agg / "runs.csv"), pd.read_csv(agg / "steps.csv")
    runs = runs[runs["status"] == "ok"]
    return runs, steps[(steps["timed"] == 1) & steps["run_dir"].isin(runs["run_dir"])]


def noise_parts(runs: pd.DataFrame, steps: pd.DataFrame) -> dict[str, float]:
    """w (within-run variance of the log mean per second timed), σ_between², the fixed seconds of a
    run, the median seconds timed, and the steps' lag-1 autocorrelation (medians over runs)."""
    paced = steps.groupby(["run_dir", "step"])["total_s"].max().reset_index()  # the slowest rank paces the step
    per_run = []
    for run_dir, g in paced.groupby("run_dir"):
        x = g.sort_values("step")["total_s"].to_numpy()
        if len(x) < 4 or x.mean() <= 0:
            continue
        rho = float(np.clip(pd.Series(x).autocorr(1), 0.0, 0.9)) if x.std() > 0 else 0.0
        w = x.var(ddof=1) / len(x) / x.mean() ** 2 * (1 + rho) / (1 - rho)
        per_run.append((run_dir, w, rho))
    within = pd.DataFrame(per_run, columns=["run_dir", "w", "rho"]).merge(
        runs[["run_dir", "timeline_timed_steps_s", "samples_per_s"]], on="run_dir")
    within["w_per_s"] = within["w"] * within["timeline_timed_steps_s"]
    within["cell"] = within["run_dir"].str.replace(r"/repeat~\d+$", "", regex=True)
    within["log_tp"] = np.log(within["samples_per_s"])
    parts = []
    for _, g in within.groupby("cell"):
        if len(g) >= 2:
            parts.append((len(g) - 1, g["log_tp"].var(ddof=1) - g["w"].mean()))
    between = max(0.0, sum(k * v for k, v in parts) / sum(k for k, _ in parts)) if parts else float("nan")
    wall = runs["timeline_launcher_exit"] - runs["timeline_launcher_start"]
    return {
        "w_per_s": float(within["w_per_s"].median()), "between_var": between,
        "fixed_s": float((wall - runs["timeline_timed_steps_s"]).median()),
        "timed_s": float(runs["timeline_timed_steps_s"].median()), "rho": float(within["rho"].median()),
    }  # fmt: skip


def per_decision(parts: dict[str, float], t: float) -> float:
    """Seconds of runs per decision at timed length t, up to a constant factor."""
    return (parts["between_var"] + parts["w_per_s"] / t) * (parts["fixed_s"] + t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="results folders, each optionally label=path")
    ap.add_argument("--lengths", default="0.25,0.5,1,2,5", help="timed seconds a run to compare")
    args = ap.parse_args(argv)
    lengths = [float(x) for x in args.lengths.split(",")]
    found = {}
    for job in args.results:
        label, _, path = job.rpartition("=")
        found[label or path] = noise_parts(*tables(path))
    print("| | " + " | ".join(found) + " |")
    print("|---|" + "---|" * len(found))
    rows = {
        "a run's fixed seconds (launch, set-up, warm-up, teardown)": lambda p: f"{p['fixed_s']:.2f} s",
        "seconds timed a run (median)": lambda p: f"{p['timed_s']:.2f} s",
        "within-run sd of the log throughput, at 1 s timed": lambda p: f"{np.sqrt(p['w_per_s']):.3f}",
        "steps' lag-1 autocorrelation": lambda p: f"{p['rho']:.2f}",
        "between-run sd of the log throughput": lambda p: f"{np.sqrt(p['between_var']):.3f}",
        **{f"time per decision at {t:g} s timed (ran at: 1.00)":
           (lambda p, t=t: f"{per_decision(p, t) / per_decision(p, p['timed_s']):.2f}") for t in lengths},
    }  # fmt: skip
    for name, cell in rows.items():
        print(f"| {name} | " + " | ".join(cell(p) for p in found.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
