"""The run-until-decided design's error rates at the shipped settings, and its per-look level.

    python benchmarks/design_error_rates.py [--grids 2000] [--reps 400000] [--seed 0] [--part machine]

Prints (1) the per-look level LOOK_ALPHA re-derived over every look path and noise ratio
(`sequential.calibrate_look_alpha`; the smallest is the one the design uses) with the level of
each, and (2) docs/report.md's table of error rates (`analysis.design_rates.table`: the real
stopping rule on the default grid's 21 questions, `--grids` grids a condition) with each
condition's runs, then the runs without a job effect judged as before the blocked analysis, and
(3) its second table, the design on a shared machine (`design_rates.machine_table`: slow runs,
drift, effects shared by a round; the drift check's firing rate). `--part rates` prints (2) alone, `--part machine` (3).
Minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from ddpbench.analysis import design_rates, sequential


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grids", type=int, default=2000, help="simulated grids per condition")
    ap.add_argument("--reps", type=int, default=400_000, help="replicates per look path and noise ratio")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", choices=("all", "rates", "machine"), default="all",
                    help="rates: (2) alone; machine: (3) alone")
    args = ap.parse_args()
    start = time.perf_counter()
    if args.part == "machine":
        print(design_rates.machine_table(args.grids, args.seed))
        print(f"\n[{time.perf_counter() - start:.0f} s; {args.grids} grids a condition, seed {args.seed}]")
        return
    if args.part == "rates":
        print(design_rates.table(args.grids, args.seed))
        print(f"\n[{time.perf_counter() - start:.0f} s; {args.grids} grids a condition, seed {args.seed}]")
        return
    alpha, each = sequential.calibrate_look_alpha(reps=args.reps, seed=args.seed)
    print(f"LOOK_ALPHA re-derived: {alpha:.5f} (in use: {sequential.LOOK_ALPHA}); {args.reps:,} replicates each")
    for (path, ratio), a in sorted(each.items(), key=lambda kv: kv[1]):
        print(f"  {path:>9} noise ratio {ratio:>3}: {a:.5f}")
    print(f"[{time.perf_counter() - start:.0f} s]\n")
    print(design_rates.table(args.grids, args.seed))
    print("\nthe price of the blocked analysis: the conditions without a job effect judged as before it")
    for s in design_rates.settings()[:2]:
        rates = design_rates.simulate(dataclasses.replace(s, blocked=False), args.grids, args.seed)
        print(f"{s.name}, not blocked: {rates['runs']:.1f} runs a grid, {100 * rates['decided']:.1f} % of questions decided")
    print("\nthe design on a shared machine\n" + design_rates.machine_table(args.grids, args.seed))
    print(f"\n[{time.perf_counter() - start:.0f} s; {args.grids} grids a condition, seed {args.seed}]")


if __name__ == "__main__":
    main()
