"""How well does the step model predict cells it did not see? Its held-out error on a result set,
beside the scaling laws' where those can be fitted (docs/report.md quotes the output).

    python benchmarks/step_model_error.py RESULTS [--sweep comm.csv] [--hold-out 8]

RESULTS is a result folder (its aggregate/runs.csv or runs.csv) or a runs.csv. Printed: every
held-out prediction (each communicating cell in turn; the largest world size as a block; each
measured link in turn as a block) against its measurement, then per kind of hold-out the median and
worst absolute error of the step time and the share of intervals that covered the measurement.
With 3 or more world sizes, the step model's speedup at --hold-out (fitted on the smaller ones) is
printed beside Amdahl's and the cost model's (benchmarks/scaling_holdout.py), as speedup errors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from scaling_holdout import holdout  # noqa: E402

from ddpbench import analysis as A  # noqa: E402
from ddpbench import stepmodel  # noqa: E402


def runs_csv(path: Path) -> Path:
    for candidate in (path, path / "aggregate" / "runs.csv", path / "runs.csv"):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"{path}: no runs.csv (looked in aggregate/ and the folder itself)")


def laws_side_by_side(runs: pd.DataFrame, table: pd.DataFrame, hold_out: int) -> pd.DataFrame:
    """Speedup errors at `hold_out` of Amdahl, the cost model and the step model (its largest-world-size
    block: measured / predicted step time − 1, the same baseline on both sides)."""
    laws = holdout(runs, hold_out)
    block = table[table["held_out"].str.startswith("largest world size") & table["predicted_s"].notna()].copy()
    block["strategy"] = block["cell"].str.extract(r"strategy=([\w]+)")[0]
    rows = [dict(strategy=r.strategy, law="step_model", rel_error=r.measured_s / r.predicted_s - 1,
                 covered=r.covered) for r in block.itertuples()]  # fmt: skip
    side = pd.concat([laws[["strategy", "law", "rel_error"]] if "rel_error" in laws else laws, pd.DataFrame(rows)])
    return side.pivot_table(index="strategy", columns="law", values="rel_error", aggfunc="first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--sweep", type=Path, help="the collective sweep's CSV (ddpbench commbench)")
    parser.add_argument("--hold-out", type=int, default=None, help="world size for the laws' side by side (default: the largest)")
    args = parser.parse_args()
    path = runs_csv(args.results)
    runs = A.load_runs(path)
    sweep = pd.read_csv(args.sweep) if args.sweep else None
    v = stepmodel.validate(runs, sweep)
    fmt = {"display.width": 220, "display.max_columns": 20, "display.max_colwidth": 90, "display.float_format": "{:.4g}".format}
    with pd.option_context(*[x for kv in fmt.items() for x in kv]):
        print(f"{path}: {len(v.model.measured.cells)} cells, {len(runs)} runs")
        print(v.table.drop(columns=["note"]).to_string(index=False))
        print()
        print(v.summary.to_string(index=False))
        for note in v.notes:
            print("note:", note)
        sizes = sorted(set(runs.loc[runs["status"] == "ok", "world_size"]))
        if len(sizes) >= 4:
            hold = args.hold_out or sizes[-1]
            print(f"\nspeedup at p = {hold}, fitted on p < {hold}: relative error of each law")
            print(laws_side_by_side(runs, v.table, hold).to_string())


if __name__ == "__main__":
    main()
