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
Not a test: timings on a shared machine are noisy; run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ddpbench.core.params import CellParams

COLUMNS = ("samples_per_s", "step_ms", "comm_ms", "exposed_ms", "hidden_ms")


def run_cell(params: CellParams, fork: bool, out: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "ddpbench.run.torchrun", "--standalone", "--nproc-per-node", "2", "--max-restarts", "0"]
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
        for i in range(args.pairs):
            for fork in ((True, False) if i % 2 == 0 else (False, True)):
                runs[fork].append(run_cell(params, fork, root / f"{name}-{i}-{'fork' if fork else 'spawn'}"))
        print(f"{name} {params.model} bucket_mb {params.bucket_mb} batch {params.batch_size}, world 2, "
              f"{args.pairs} pairs (medians; ms per step)")
        print(f"  {'':24s}" + "".join(f"{c:>15s}" for c in COLUMNS))
        for fork, label in ((True, "forked (the launcher's)"), (False, "new interpreters")):
            print(f"  {label:24s}" + "".join(f"{statistics.median(r[c] for r in runs[fork]):15.2f}" for c in COLUMNS))
        diffs = {c: [b[c] - a[c] for a, b in zip(runs[True], runs[False])] for c in COLUMNS}
        print(f"  {'new - forked':24s}" + "".join(f"{statistics.median(diffs[c]):+15.2f}" for c in COLUMNS))
        print(f"  {'pairs new > forked':24s}" + "".join(f"{sum(d > 0 for d in diffs[c]):>12d}/{args.pairs}" for c in COLUMNS))


if __name__ == "__main__":
    main()
