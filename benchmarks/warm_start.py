"""Does a cell started warm (its zygote forked from a server with torch imported,
ddpbench.run.warm) measure what a cold one does, and what does it save? The same cells both
ways through the launcher, interleaved.

    python benchmarks/warm_start.py [--pairs 8] [--cells single:1 allreduce:2 ddp:2] [cell flags]

Each pair launches a cell once with DDPBENCH_WARM_START=0 (cold: its zygote a new interpreter that
imports torch) and once warm, in alternating order, each cell as the default grid runs it (mlp,
cifar10-shaped synthetic data, batch 128, 2,048 samples, 1 thread a rank, at least 1 s and 20
steps timed). The servers are started before the first pair (a workflow's first run of a cell
starts its server and costs what a cold one does), in a private folder of their own, retired
at the end. Printed per cell: the medians cold and warm of throughput, step time, the run's wall
(launcher start to exit) and its torchrun span (the launcher starting torchrun until the ranks
run), and the ratio warm/cold of throughput over the pairs with its 95 % interval (pairs' log
ratios, t): "within noise" when the interval holds 1.

Not a test: quote the load. Under load: bash scripts/under_load.sh -- python benchmarks/warm_start.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scipy import stats

from ddpbench.run import warm

FLAGS = [
    "--model", "mlp", "--synthetic-shape", "cifar10", "--batch-size", "128", "--dataset-size", "2048",
    "--test-size", "256", "--threads-per-rank", "1", "--warmup-steps", "2", "--min-timed-steps", "20",
    "--min-timed-s", "1.0", "--timeout-s", "120",
]  # fmt: skip
COLUMNS = ("samples_per_s", "step_ms", "run_s", "torchrun_s")


def launch(strategy: str, ranks: int, warm_start: bool, out: Path, folder: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", str(ranks), "--out", str(out)]
    env = dict(os.environ, **{warm.SWITCH_ENV: "1" if warm_start else "0", warm.FOLDER_ENV: str(folder)})
    subprocess.run([*cmd, "--strategy", strategy, *FLAGS], env=env, stdout=subprocess.DEVNULL, check=True)
    s = json.loads((out / "summary.json").read_text())
    if s["status"] != "ok":
        raise SystemExit(f"{out}: {s['status']}: {s['reason']}")
    log = (out / "train.log").read_text()
    if warm_start and "cold start" in log:
        raise SystemExit(f"{out}: asked warm, started cold: {log}")
    t = s["timeline"]
    return {
        "samples_per_s": s["samples_per_s"], "step_ms": s["step_time_median_s"] * 1e3,
        "run_s": t["launcher_exit"] - t["launcher_start"], "torchrun_s": t["ranks_started"] - t["torchrun_started"],
    }  # fmt: skip


def ratio_interval(warm_runs: list[float], cold_runs: list[float]) -> tuple[float, float, float]:
    """The geometric-mean ratio warm/cold over the pairs and its 95 % t interval."""
    logs = [math.log(w / c) for w, c in zip(warm_runs, cold_runs)]
    mean, n = statistics.fmean(logs), len(logs)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else math.inf
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--cells", nargs="+", default=["single:1", "allreduce:2", "ddp:2"], help="STRATEGY:RANKS")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="warm_start_"))
    folder = root / "servers"
    cells = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cells]
    try:
        for strategy, ranks in cells:  # start each cell's server (not measured)
            launch(strategy, ranks, True, root / f"{strategy}-{ranks}-first", folder)
        print(f"{len(cells)} cells, {args.pairs} pairs each, cold and warm alternating; load average "
              f"{os.getloadavg()[0]:.2f} at the start")
        for strategy, ranks in cells:
            runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
            for i in range(args.pairs):
                for warm_start in (True, False) if i % 2 == 0 else (False, True):
                    tag = f"{strategy}-{ranks}-{i}-{'warm' if warm_start else 'cold'}"
                    runs[warm_start].append(launch(strategy, ranks, warm_start, root / tag, folder))
            print(f"\n{strategy} at {ranks} rank(s) (medians)")
            print(f"  {'':8s}" + "".join(f"{c:>15s}" for c in COLUMNS))
            for warm_start, label in ((False, "cold"), (True, "warm")):
                print(f"  {label:8s}" + "".join(f"{statistics.median(r[c] for r in runs[warm_start]):15.3f}" for c in COLUMNS))
            center, low, high = ratio_interval([r["samples_per_s"] for r in runs[True]],
                                               [r["samples_per_s"] for r in runs[False]])  # fmt: skip
            verdict = "within noise" if low <= 1 <= high else "differs"
            print(f"  throughput warm/cold {center:.3f} [{low:.3f}, {high:.3f}] ({verdict}); a run "
                  f"{statistics.median(r['run_s'] for r in runs[False]):.2f} s cold, "
                  f"{statistics.median(r['run_s'] for r in runs[True]):.2f} s warm")
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    finally:
        warm.retire_all(folder)


if __name__ == "__main__":
    main()
