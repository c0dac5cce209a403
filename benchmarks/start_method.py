"""Do ranks forked from the launcher's zygote measure what ranks started as new interpreters
(plain torchrun, what real training uses) measure? The same cell both ways, interleaved.

    python benchmarks/start_method.py [--pairs 8] [--strategies ddp bucketed_allreduce] [cell flags]

Each pair runs the cell once with `--start-method fork` (ranks forked from a process that
has the harness imported: the launcher's choice for CPU cells, ddpbench.run.torchrun) and
once as torchrun starts ranks by default (a new `python -m ddpbench.run.train` each), in
alternating order. Printed per strategy and start method: medians of throughput, step time,
communication and exposed communication per step, the communication hidden behind backward
(comm - exposed), and the median paired difference spawn - fork with the count of pairs
where spawn was higher. `bucketed_allreduce` at the same `bucket_mb` sends the same buckets
blocking (nothing overlaps): the control for whether the all-reduce itself differs.
Each pair also runs `single` at world size 1 both ways, so the table gives the speedup at p = 2
(the world-size-1 cell's step time over the p = 2 cell's, pair by pair; strong scaling).

Under load it answers whether forked ranks get the CPU share torchrun's do (issue 68: they sat
in the launcher's session, one autogroup share for the whole cell where torchrun gives each
rank a session and a share of its own):

    bash scripts/under_load.sh -- python benchmarks/start_method.py --pairs 6 --strategies ddp

Not a test: quote the load; without under_load.sh, run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ddpbench.core.params import CellParams

COLUMNS = ("samples_per_s", "step_ms", "comm_ms", "exposed_ms", "hidden_ms", "speedup")


def run_cell(params: CellParams, fork: bool, out: Path, ranks: int = 2) -> dict[str, float]:
    cmd = [sys.executable, "-m", "ddpbench.run.torchrun", "--standalone", "--nproc-per-node", str(ranks)]
    cmd += ["--max-restarts", "0"]
    cmd += ["--start-method", "fork"] if fork else []
    cmd += ["-m", "ddpbench.run.train", "--out", str(out), *params.to_argv()]
    threads = str(params.threads_per_rank or 1)
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    s = json.loads((out / "summary.json").read_text())
    if s["status"] != "ok":
        raise SystemExit(f"{out}: {s['status']}: {s['reason']}")
    n = s["timed_steps"]
    comm, exposed = s["phase_comm_s"] / n * 1e3, s["phase_exposed_comm_s"] / n * 1e3
    return {"samples_per_s": s["samples_per_s"], "step_ms": s["step_time_median_s"] * 1e3,
            "comm_ms": comm, "exposed_ms": exposed, "hidden_ms": comm - exposed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--strategies", nargs="+", default=["ddp", "bucketed_allreduce"])
    CellParams.add_arguments(parser)
    parser.set_defaults(model="mlp", bucket_mb=0.5, batch_size=64, epochs=10, max_steps=200, warmup_steps=10,
                        threads_per_rank=1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="start_method_"))
    for name in args.strategies:
        args.strategy = name
        params = CellParams.from_namespace(args)
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        alone = dataclasses.replace(params, strategy="single")
        for i in range(args.pairs):
            for fork in ((True, False) if i % 2 == 0 else (False, True)):
                tag = f"{name}-{i}-{'fork' if fork else 'spawn'}"
                one = run_cell(alone, fork, root / f"{tag}-single", ranks=1)
                run = run_cell(params, fork, root / tag)
                runs[fork].append({**run, "speedup": one["step_ms"] / run["step_ms"]})
        print(f"{name} {params.model} bucket_mb {params.bucket_mb} batch {params.batch_size}, world 2, "
              f"{args.pairs} pairs (medians; ms per step; speedup: single at p = 1 over the cell), "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"  {'':24s}" + "".join(f"{c:>15s}" for c in COLUMNS))
        for fork, label in ((True, "forked (the launcher's)"), (False, "new interpreters")):
            print(f"  {label:24s}" + "".join(f"{statistics.median(r[c] for r in runs[fork]):15.2f}" for c in COLUMNS))
        diffs = {c: [b[c] - a[c] for a, b in zip(runs[True], runs[False])] for c in COLUMNS}
        print(f"  {'new - forked':24s}" + "".join(f"{statistics.median(diffs[c]):+15.2f}" for c in COLUMNS))
        print(f"  {'pairs new > forked':24s}" + "".join(f"{sum(d > 0 for d in diffs[c]):>12d}/{args.pairs}" for c in COLUMNS))


if __name__ == "__main__":
    main()
