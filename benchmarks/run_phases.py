"""Where a run's time goes (issue 73, item 1): the spans of every run's timeline in a main job's
results, side by side for several jobs (quiet, under load).

    python benchmarks/run_phases.py results/ [LABEL=]other-results/ ...

Each argument is a results folder (its aggregate/runs.csv, which `bash scripts/main.sh` writes) or
a runs.csv, optionally named `label=path`. Prints one markdown table, a column per job: each span's
median seconds over the job's runs and its share of their summed wall (launcher start to exit);
then the runs, the seconds timed and the share of the design's wall in timed steps (first launch
to last exit, the runs' spans and what the workflow does between them). The spans are the
timeline's (docs/harness.md, "The cost of a run beyond its measurement"): `torchrun` is the
launcher's torchrun starting until the ranks run (with the forked agent: the rank processes
forked from an imported one), `imports` what the ranks import after, `setup` the model and data.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import pandas as pd

SPANS = ("launcher", "torchrun", "imports", "process_group", "setup", "warmup", "timed_steps", "evaluation",
         "results", "teardown", "launcher_finish")  # fmt: skip


def runs_table(path: str) -> pd.DataFrame:
    """The runs.csv of a results folder (or the file itself); SystemExit naming it where absent."""
    p = pathlib.Path(path)
    csv = p if p.is_file() else p / "aggregate" / "runs.csv"
    if not csv.is_file():
        sys.exit(f"run_phases: no runs.csv at {csv} (a results folder from `bash scripts/main.sh`, or its runs.csv)")
    runs = pd.read_csv(csv)
    missing = [f"timeline_{s}_s" for s in SPANS if f"timeline_{s}_s" not in runs]
    if missing:
        sys.exit(f"run_phases: {csv} has no {', '.join(missing)} (runs written before the timeline?)")
    return runs[runs["status"] == "ok"] if "status" in runs else runs


def column(runs: pd.DataFrame) -> dict[str, str]:
    """One job's figures, by row name."""
    wall = runs["timeline_launcher_exit"] - runs["timeline_launcher_start"]
    total = float(wall.sum())
    out = {}
    for span in SPANS:
        s = runs[f"timeline_{span}_s"]
        out[span] = f"{s.median():.2f} s ({100 * s.sum() / total:.0f} %)"
    out["a run, launcher start to exit"] = f"{wall.median():.2f} s (100 %)"
    design = float(runs["timeline_launcher_exit"].max() - runs["timeline_launcher_start"].min())
    timed = float(runs["timeline_timed_steps_s"].sum())
    out["runs"] = str(len(runs))
    out["seconds timed, of the runs' walls"] = f"{timed:.0f} s of {total:.0f} s ({100 * timed / total:.1f} %)"
    out["share of the design's wall timed"] = f"{100 * timed / design:.1f} % ({design:.0f} s, first launch to last exit)"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", nargs="+", help="results folders or runs.csv files, each optionally label=path")
    args = ap.parse_args(argv)
    columns = {}
    for job in args.jobs:
        label, _, path = job.rpartition("=")
        columns[label or path] = column(runs_table(path))
    rows = list(next(iter(columns.values())))
    print("| span (median a run, share of the runs' summed wall) | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in rows:
        print(f"| {row} | " + " | ".join(c[row] for c in columns.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
