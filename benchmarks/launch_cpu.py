"""The CPU and wall of one small cell's whole launch, for two source trees side by side:
the machine's CPU seconds (all processes: /proc/stat) around each `python -m
ddpbench.run.launch`, so the ranks forked from a fork server, which nobody waits for, are
counted too. Runs alternate between the trees (pair i: before first when i is even), the first
pair of each cell only warms the page cache.

    python benchmarks/launch_cpu.py --before /path/to/old/checkout/src [--after src] [--pairs 6]

A tree is put first on PYTHONPATH (ahead of the editable install); every cell is a 2-step MLP:
single at one rank, allreduce and ddp at two. Not a test: quote the load average it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CELLS = [("single", 1), ("allreduce", 2), ("ddp", 2)]
FLAGS = ["--model", "mlp", "--batch-size", "32", "--dataset-size", "256", "--warmup-steps", "0", "--max-steps", "2",
         "--min-timed-steps", "1", "--min-timed-s", "0"]  # fmt: skip


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (all but idle and iowait)."""
    ticks = list(map(int, Path("/proc/stat").read_text().split("\n")[0].split()[1:]))
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def one_launch(src: str, strategy: str, ranks: int, out: Path) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", str(ranks), "--out", str(out),
           "--strategy", strategy, *FLAGS]  # fmt: skip
    cpu, start = busy_cpu_s(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    wall, cpu = time.perf_counter() - start, busy_cpu_s() - cpu
    status = json.loads((out / "summary.json").read_text())["status"]
    if status != "ok":
        raise SystemExit(f"{src}: {strategy} p={ranks} ended {status} ({out})")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the src folder of the tree to compare against")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parents[1] / "src"))
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    print(f"load before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        for strategy, ranks in CELLS:
            got: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
            for i in range(args.pairs + 1):
                for name in (["before", "after"] if i % 2 == 0 else ["after", "before"]):
                    measured = one_launch(trees[name], strategy, ranks, Path(tmp) / f"{strategy}-{name}-{i}")
                    if i:
                        got[name].append(measured)
            (wb, cb), (wa, ca) = ([statistics.median(x[k] for x in got[n]) for k in (0, 1)] for n in ("before", "after"))
            print(f"{strategy:9s} p={ranks}  wall {wb:.2f} -> {wa:.2f} s ({wa / wb:.2f}x)   "
                  f"CPU {cb:.2f} -> {ca:.2f} s ({ca / cb:.2f}x)   medians of {args.pairs} pairs")  # fmt: skip
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
