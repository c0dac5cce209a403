"""Do the scaling laws predict beyond what was measured? Fit on the smaller world sizes,
predict the largest, compare with its measurement.

    python benchmarks/scaling_holdout.py RESULTS [--hold-out 8]

RESULTS is a result folder (its runs.csv) of a strong-scaling grid such as
configs/cpu-scaling.yaml. The fits (Amdahl on step times, the cost model on compute and
communication) see every run below the held-out world size; the baseline's p = 1 runs
stand in as each strategy's p = 1 point (at one process a synchronising strategy sends
nothing: it is the baseline). Printed per strategy: the predicted speedup at the held-out
p with its interval, the measured one with its interval, and the relative error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ddpbench import analysis as A


def holdout(runs: pd.DataFrame, hold_out: int, baseline: str = A.BASELINE_STRATEGY) -> pd.DataFrame:
    ok = runs[runs["status"] == "ok"]
    base = ok[(ok["strategy"] == baseline) & (ok["world_size"] == 1)]
    strategies = sorted(set(ok["strategy"]) - {baseline})
    # Each strategy's p = 1 point is the baseline's runs, relabelled.
    train = pd.concat([ok[ok["world_size"] < hold_out], *(base.assign(strategy=s) for s in strategies)])
    speed_train = A.speedup_table(train, baseline)
    fits = A.fits_table(train, speed_train, baseline_strategy=baseline)
    measured = A.speedup_table(ok, baseline)
    rows = []
    for s in strategies:
        got = measured[(measured["strategy"] == s) & (measured["world_size"] == hold_out)]
        if got.empty:
            continue
        got = got.iloc[0]
        for law in ("amdahl", "cost_model"):
            pred = fits[(fits["strategy"] == s) & (fits["law"] == law) & (fits["kind"] == "prediction") & (fits["p"] == hold_out)]
            if pred.empty:
                note = fits[(fits["strategy"] == s) & (fits["law"] == law)]["note"]
                rows.append(dict(strategy=s, law=law, note=note.iloc[0] if len(note) else "no fit"))
                continue
            pred = pred.iloc[0]
            rows.append(
                dict(
                    strategy=s, law=law, predicted=pred["estimate"], predicted_low=pred["ci_low"], predicted_high=pred["ci_high"],
                    measured=got["speedup"], measured_low=got["speedup_ci_low"], measured_high=got["speedup_ci_high"],
                    rel_error=pred["estimate"] / got["speedup"] - 1,
                )
            )  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="result folder or its runs.csv")
    parser.add_argument("--hold-out", type=int, default=8, help="world size to predict (fits use the smaller ones)")
    args = parser.parse_args()
    path = args.results / "runs.csv" if args.results.is_dir() else args.results
    table = holdout(A.load_runs(path), args.hold_out)
    if table.empty:
        raise SystemExit(f"no strategy has ok runs at world size {args.hold_out} in {path}")
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(f"speedup at p = {args.hold_out}: fitted on p < {args.hold_out}, against the measurement")
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()
