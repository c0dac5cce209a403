"""How long `snakemake -n` takes to expand, validate and schedule the grid.

    python benchmarks/dryrun_scale.py [--repeats 3] [--cells 5000] [--json out.json]

Measures, in a scratch working directory (the checkout is not touched), the wall time
and the CPU time (user + sys of the snakemake process) of:

  startup   a one-rule Snakefile: Snakemake's own start-up cost, for reference
  default   the default grid of config.yaml (targets: < 5 s)
  large     a generated grid of --cells cells, one repeat each (target: < 60 s)

Wall time depends on how busy the machine is; CPU time much less, so both are shown.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGETS = {"default": 5.0, "large": 60.0}


def large_grid(cells: int) -> dict:
    """A grid of exactly `cells` cells over five axes (factors of `cells`)."""
    strategies = ["gather_scatter", "allreduce", "bucketed_allreduce", "ring_allreduce", "ddp"]
    rest = cells // len(strategies)
    if rest * len(strategies) != cells:
        raise SystemExit(f"--cells must be a multiple of {len(strategies)}")
    # split `rest` over world_size, batch_size, dataset_size, lr as evenly as possible
    sizes, left = [], rest
    for axes_left in (4, 3, 2, 1):
        size = max(d for d in range(1, left + 1) if left % d == 0 and d <= math.ceil(left ** (1 / axes_left)) + 1)
        sizes.append(size)
        left //= size
    sizes[-1] *= left
    ws, bs, ds, lr = sizes
    return {
        "grid": {
            "device": ["cpu"],
            "world_size": list(range(1, ws + 1)),
            "strategy": strategies,
            "batch_size": [16 * (i + 1) for i in range(bs)],
            "dataset_size": [1024 * (i + 1) for i in range(ds)],
            "model": ["mlp"],
            "dataset": ["synthetic"],
            "num_workers": [0],
            "lr": [round(0.01 * (i + 1), 4) for i in range(lr)],
        },
        "repeats": 1,
        "exclude": [],
        "baseline": {"strategy": "allreduce", "world_size": 1},
    }


def timed(cmd: list[str], cwd: pathlib.Path) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def count_jobs(stdout: str) -> int:
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "total" and parts[1].isdigit():
            return int(parts[1])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="measurements per case (median reported)")
    parser.add_argument("--cells", type=int, default=5000, help="cells of the large grid")
    parser.add_argument("--json", help="also write the figures as JSON here")
    args = parser.parse_args(argv)

    snakemake = [sys.executable, "-m", "snakemake", "--dry-run", "--quiet", "rules", "--cores", "2"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="ddpbench-dryrun-") as scratch:
        scratch = pathlib.Path(scratch)
        startup = scratch / "startup"
        startup.mkdir()
        (startup / "Snakefile").write_text('rule all:\n    output: "x"\n    shell: "touch {output}"\n')
        large = scratch / "large"
        large.mkdir()
        (large / "config.yaml").write_text(yaml.safe_dump(large_grid(args.cells)))
        default = scratch / "default"
        default.mkdir()
        (default / "config.yaml").write_text((ROOT / "config.yaml").read_text())
        cases = {
            "startup": (startup, snakemake),
            "default": (default, [*snakemake, "--snakefile", str(ROOT / "Snakefile")]),
            "large": (large, [*snakemake, "--snakefile", str(ROOT / "Snakefile")]),
        }
        for name, (cwd, cmd) in cases.items():
            walls, cpus, jobs = [], [], 0
            for _ in range(args.repeats):
                wall, cpu, out = timed(cmd, cwd)
                walls.append(wall)
                cpus.append(cpu)
                jobs = count_jobs(out)
            results[name] = {
                "jobs": jobs,
                "wall_s": round(statistics.median(walls), 2),
                "cpu_s": round(statistics.median(cpus), 2),
                "target_s": TARGETS.get(name),
            }
            print(f"{name:8s} {jobs:6d} jobs  wall {results[name]['wall_s']:6.2f} s  cpu {results[name]['cpu_s']:6.2f} s"
                  + (f"  (target < {TARGETS[name]:.0f} s)" if name in TARGETS else ""), flush=True)  # fmt: skip
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({**results, "loadavg": load, "cores": os.cpu_count()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
