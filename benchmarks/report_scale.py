"""How long the report takes, and how much memory and page it makes, as the grid grows.

    python benchmarks/report_scale.py [--repeats 1] [--sizes default,100,1000,8100] [--keep DIR] [--json out.json]

Builds synthetic runs tables (tests/report_synth.make_runs; a models axis for the larger ones)
in a scratch folder and, for each, runs in a fresh process:

  read     reading the table (analysis.load_runs): the floor, start-up of Python and pandas included
  report   ddpbench report --no-pdf --runs runs.csv --out DIR (the whole report: tables,
           statistics, fits, figures, report.html and report.tex)

and prints, side by side per size: wall time of each, peak memory (maximum resident set size)
of the report process and of its largest child (figure workers, when it draws in parallel), the
size of the HTML entry page (report.html) and of the whole report folder, and the number of
figures and figure groups. Sizes:

  default  the main job's grid: 6 strategies at p = 1, 2; one batch and dataset size; 6 repeats
           (36 runs, with a steps table as the main job has)
  100      4 strategies x p = 1, 2, 4 x 2 batch sizes x 5 repeats
  1000     7 strategies x p = 1, 2, 4, 8 x 2 batch x 2 dataset sizes x 2 models x 5 repeats
  8100     8 strategies (single at p = 1 only, the others at p = 2..32) x 6 world sizes x 5 batch
           x 3 dataset sizes x 3 models x 5 repeats: 1,620 cells, the size of a cluster study
           (targets: <= 20 s, <= 500 MB, entry page <= 5 MB)

Wall time depends on how busy the machine is: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
TARGETS = {"8100": {"report_s": 20.0, "peak_mb": 500.0, "html_mb": 5.0}}

EIGHT = ("single", "ddp", "allreduce", "bucketed_allreduce", "ring_allreduce", "gather_scatter", "zero", "powersgd")
SIZES = {
    "default": dict(strategies=EIGHT[:6], world_sizes=(1, 2), batch_sizes=(128,), dataset_sizes=(2048,), repeats=6,
                    others_at_1=False, failures=False),
    "100": dict(strategies=EIGHT[:4], world_sizes=(1, 2, 4), batch_sizes=(32, 64), repeats=5, failures=False),
    "1000": dict(strategies=EIGHT[:7], world_sizes=(1, 2, 4, 8), batch_sizes=(32, 64), dataset_sizes=(2048, 4096),
                 models=("mlp", "simple_cnn"), repeats=5, failures=False),
    "8100": dict(strategies=EIGHT, world_sizes=(1, 2, 4, 8, 16, 32), batch_sizes=(16, 32, 64, 128, 256),
                 dataset_sizes=(2048, 4096, 8192), models=("mlp", "simple_cnn", "resnet18"), repeats=5,
                 others_at_1=False, failures=True),
}  # fmt: skip

# Runs `argv` as `ddpbench report` (or the table read alone) in this process, then
# writes its own and its children's peak resident set size (kB on Linux) to the file named last.
CHILD = r"""
import json, resource, sys
argv, where = sys.argv[1:-1], sys.argv[-1]
if argv[0] == "--read":
    from ddpbench import analysis
    analysis.load_runs(argv[1])
    rc = 0
else:
    from ddpbench.report import build as report
    rc = report.main(argv)
with open(where, "w") as f:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    json.dump({"self_kb": me.ru_maxrss, "children_kb": kids.ru_maxrss, "rc": rc,
               "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}, f)
sys.exit(rc)
"""


def measured(args: list[str], scratch: pathlib.Path) -> dict:
    where = scratch / "rusage.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *args, str(where)], cwd=ROOT, env=env, capture_output=True,
                          text=True)  # fmt: skip
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    use = json.loads(where.read_text())
    return {"wall_s": wall, "cpu_s": use["cpu_s"], "peak_mb": use["self_kb"] / 1024, "child_peak_mb": use["children_kb"] / 1024}


def folder_mb(path: pathlib.Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="measurements per size (median reported)")
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated, of: " + ", ".join(SIZES))
    parser.add_argument("--keep", help="write the reports here (else a scratch folder, removed)")
    parser.add_argument("--json", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    from report_synth import make_runs, make_steps

    results = {}
    scratch = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="ddpbench-report-scale-"))
    scratch.mkdir(parents=True, exist_ok=True)
    print(f"{'size':>8s} {'runs':>6s} {'cells':>6s} | {'read s':>7s} | {'report s':>8s} {'cpu s':>6s} {'peak MB':>8s} "
          f"{'child MB':>8s} {'html MB':>8s} {'folder MB':>9s} {'figures':>7s} {'groups':>6s}", flush=True)  # fmt: skip
    try:
        for name in args.sizes.split(","):
            kw = SIZES[name]
            runs = make_runs(**kw)
            case = scratch / name
            case.mkdir(exist_ok=True)
            runs.to_csv(case / "runs.csv", index=False)
            cmd = ["--no-pdf", "--runs", str(case / "runs.csv"), "--out", str(case / "report")]
            if name == "default":
                make_steps(runs).to_csv(case / "steps.csv", index=False)
                cmd += ["--steps", str(case / "steps.csv")]
            reads, reps = [], []
            for _ in range(args.repeats):
                reads.append(measured(["--read", str(case / "runs.csv")], scratch))
                if (case / "report").exists():
                    shutil.rmtree(case / "report")
                reps.append(measured(cmd, scratch))
            out = case / "report"
            cells = len(runs.drop_duplicates([c for c in runs if c in ("strategy", "world_size", "batch_size",
                                                                       "dataset_size", "model")]))  # fmt: skip
            prefixes = {f.name.split("-")[0] for f in (out / "figures").glob("g[0-9]*-*.svg")}
            row = {
                "runs": len(runs),
                "cells": cells,
                "read_s": round(statistics.median(r["wall_s"] for r in reads), 2),
                "report_s": round(statistics.median(r["wall_s"] for r in reps), 2),
                "cpu_s": round(statistics.median(r["cpu_s"] for r in reps), 1),
                "peak_mb": round(max(r["peak_mb"] for r in reps), 1),
                "child_peak_mb": round(max(r["child_peak_mb"] for r in reps), 1),
                "html_mb": round((out / "report.html").stat().st_size / 2**20, 2),
                "folder_mb": round(folder_mb(out), 1),
                "figures": len(list((out / "figures").glob("*.svg"))),
                "groups": len(prefixes) or 1,
            }
            results[name] = row
            print(f"{name:>8s} {row['runs']:6d} {row['cells']:6d} | {row['read_s']:7.2f} | {row['report_s']:8.2f} {row['cpu_s']:6.1f} "
                  f"{row['peak_mb']:8.0f} {row['child_peak_mb']:8.0f} {row['html_mb']:8.2f} {row['folder_mb']:9.1f} "
                  f"{row['figures']:7d} {row['groups']:6d}", flush=True)  # fmt: skip
            for key, limit in TARGETS.get(name, {}).items():
                if row[key] > limit:
                    print(f"         {key} {row[key]} above the target {limit}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print("cpu s: the report's processor time, its workers' included (less sensitive to load than its wall time)")
    print("peak MB: the report process; child MB: its largest child (figure workers), 0 when it draws alone")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({**results, "loadavg": load, "cores": os.cpu_count()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
