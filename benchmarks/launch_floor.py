"""What one ddpbench cell costs beyond torchrun's own floor: the wall of a minimal torchrun
job and of a ddpbench cell with one timed step, interleaved in one run, per world size,
their ratio (issue 19's target: cell / minimal <= 1.15 at world size 2), and where the
cell's time goes (the median seconds between consecutive marks of its summary's timeline).

    python benchmarks/launch_floor.py [--world-sizes 1,2] [--repeats 5] [--strategy ddp] [--keep DIR]

Minimal job: `torchrun --standalone --nproc-per-node N` of this file, whose ranks only do
init_process_group("gloo"), barrier(), destroy_process_group() (they stamp the same
marks a cell does, so the two breakdowns line up). Cell: `ddpbench launch
--nproc-per-node N --strategy ddp --model mlp --batch-size 128 --dataset-size 512
--warmup-steps 0 --max-steps 2 --min-timed-steps 1 --min-timed-s 0` (step 0 untimed,
step 1 timed; the default test set of 512 samples is evaluated; at world size 1, where
ddp is refused, `--strategy single`; `--strategy S` picks another for world sizes > 1).
`--minimal-ddp`: the minimal job also wraps a Linear(4, 4) in DistributedDataParallel at
world sizes > 1 -- the floor of any DDP program, since torch's DDP constructor imports
torch._dynamo (about 1.8 s here, and a slower exit) whoever calls it.
Both are started as subprocesses and timed from outside (perf_counter around the whole
process). Rounds alternate the order (minimal first, then cell first), so drift in the
machine's load hits both alike. `--world-sizes 1,2,4` adds 4 ranks; where they exceed the
usable cores the cell gets --allow-oversubscribe (one thread per rank) and the numbers say more about the
machine than the harness. Not a test: quote the load average it prints, and repeat on a
quiet machine. The cell table's `outside_marks` is the outer wall minus the launcher's
(the launcher's Python starting before its first mark and exiting after its last).
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

MARKS_ENV = "LAUNCH_FLOOR_MARKS"  # where a minimal job's rank 0 writes its marks (JSON)
DDP_ENV = "LAUNCH_FLOOR_DDP"  # set: the minimal job also builds a DistributedDataParallel module
CELL_FLAGS = [
    "--model", "mlp", "--batch-size", "128", "--dataset-size", "512",
    "--warmup-steps", "0", "--max-steps", "2", "--min-timed-steps", "1", "--min-timed-s", "0",
]  # fmt: skip


def child() -> int:
    """A minimal torchrun job's rank: process group, barrier, teardown (its marks to MARKS_ENV)."""
    marks = {"ranks_started": time.time()}
    import torch.distributed as dist

    marks["imports_done"] = time.time()
    dist.init_process_group("gloo")
    marks["process_group_ready"] = time.time()
    dist.barrier()
    rank = dist.get_rank()
    marks["barrier_done"] = time.time()
    if os.environ.get(DDP_ENV):  # what any DDP program pays: torch's constructor imports torch._dynamo
        import torch

        torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        marks["ddp_built"] = time.time()
    dist.destroy_process_group()
    marks["destroyed"] = time.time()
    if rank == 0 and os.environ.get(MARKS_ENV):
        Path(os.environ[MARKS_ENV]).write_text(json.dumps(marks))
    return 0


def run_minimal(world: int, tmp: Path, ddp: bool = False) -> tuple[float, dict[str, float]]:
    """The outer wall of one minimal job (with `ddp`, one that also wraps a Linear in DDP) and its spans
    (launch: process start to rank 0's start)."""
    marks_file = tmp / "minimal_marks.json"
    marks_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world), __file__]
    start = time.time()
    t0 = time.perf_counter()
    env = {**os.environ, MARKS_ENV: str(marks_file), **({DDP_ENV: "1"} if ddp else {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"minimal job failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    m = {"start": start, **json.loads(marks_file.read_text()), "end": end}
    names = list(m)
    return wall, {f"{a}->{b}": m[b] - m[a] for a, b in zip(names, names[1:])}


def run_cell(world: int, out: Path, strategy: str = "ddp") -> tuple[float, dict]:
    """The outer wall of one cell and its summary."""
    from ddpbench.core import sysinfo

    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", str(world), "--out", str(out), *CELL_FLAGS]
    cmd += ["--strategy", strategy if world > 1 else "single"]
    if world > sysinfo.usable_cores():
        cmd.append("--allow-oversubscribe")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    if proc.returncode != 0 or summary.get("status") != "ok":
        raise SystemExit(f"cell failed ({summary.get('reason')}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return wall, summary


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    if "RANK" in os.environ:
        return child()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-sizes", default="1,2", help="comma-separated (default 1,2; 4 where cores allow)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each job per world size (default 5)")
    parser.add_argument("--keep", type=Path, help="keep the cells' run folders here (default: a temporary folder)")
    parser.add_argument("--strategy", default="ddp", help="the cell's strategy at world sizes > 1 (default ddp)")
    parser.add_argument("--minimal-ddp", action="store_true",
                        help="the minimal job also builds a DistributedDataParallel module (at world sizes > 1): the "
                             "floor of any DDP program, for the DDP family's cells")
    args = parser.parse_args()
    worlds = [int(w) for w in args.world_sizes.split(",")]

    from ddpbench.core.run_output import TIMELINE_SPANS

    minimal: dict[int, list[float]] = {w: [] for w in worlds}
    minimal_spans: dict[int, list[dict[str, float]]] = {w: [] for w in worlds}
    cell: dict[int, list[float]] = {w: [] for w in worlds}
    summaries: dict[int, list[dict]] = {w: [] for w in worlds}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        root = args.keep or tmp
        for r in range(args.repeats):
            for w in worlds:
                order = ("minimal", "cell") if r % 2 == 0 else ("cell", "minimal")
                for kind in order:
                    if kind == "minimal":
                        wall, spans = run_minimal(w, tmp, args.minimal_ddp and w > 1)
                        minimal[w].append(wall)
                        minimal_spans[w].append(spans)
                    else:
                        wall, summary = run_cell(w, root / f"w{w}" / f"r{r}", args.strategy)
                        cell[w].append(wall)
                        summaries[w].append(summary)
                print(f"# round {r + 1}/{args.repeats} world size {w}: minimal {minimal[w][-1]:.2f} s, "
                      f"cell {cell[w][-1]:.2f} s", file=sys.stderr, flush=True)  # fmt: skip
    load_after = os.getloadavg()

    print(f"# launch_floor: {args.repeats} of each per world size, interleaved; outer wall of each process; "
          f"cell strategy {args.strategy} (single at world size 1)")  # fmt: skip
    print(f"# load average (1, 5, 15 min) before {'/'.join(f'{x:.2f}' for x in load_before)}, "
          f"after {'/'.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} cores")  # fmt: skip
    print(f"{'world':>5} {'minimal [s]':>18} {'cell [s]':>18} {'cell/minimal':>13} {'fixed_cost_s':>13} {'timed [s]':>10}")
    for w in worlds:
        fixed = [s["fixed_cost_s"] for s in summaries[w]]
        timed = [s["timed_wall_s"] for s in summaries[w]]
        lo_hi = lambda xs: f"({min(xs):.2f}-{max(xs):.2f})"  # noqa: E731
        print(f"{w:>5} {median(minimal[w]):>6.2f} {lo_hi(minimal[w]):>11} {median(cell[w]):>6.2f} "
              f"{lo_hi(cell[w]):>11} {median(cell[w]) / median(minimal[w]):>13.2f} {median(fixed):>13.2f} "
              f"{median(timed):>10.3f}")  # fmt: skip

    print("\n# cell: median seconds between consecutive timeline marks (summary.json timeline_s)")
    spans = ["outside_marks", *TIMELINE_SPANS]
    print(f"{'span':<16}" + "".join(f"{'w=' + str(w):>9}" for w in worlds))
    for span in spans:
        row = []
        for w in worlds:
            if span == "outside_marks":  # the outer wall minus the launcher's (its Python starting and exiting)
                values = [c - (s["timeline"]["launcher_exit"] - s["timeline"]["launcher_start"])
                          for c, s in zip(cell[w], summaries[w])]  # fmt: skip
            else:
                values = [s["timeline_s"][span] for s in summaries[w] if s["timeline_s"].get(span) is not None]
            row.append(median(values))
        print(f"{span:<16}" + "".join(f"{v:>9.3f}" for v in row))

    print("\n# minimal job: median seconds between its marks (start/end: the outer process; the rest rank 0's)")
    names = list(dict.fromkeys(n for w in worlds for n in minimal_spans[w][0]))  # with --minimal-ddp p > 1 has more
    print(f"{'span':<38}" + "".join(f"{'w=' + str(w):>9}" for w in worlds))
    for name in names:
        print(f"{name:<38}" + "".join(f"{median([s[name] for s in minimal_spans[w] if name in s]):>9.3f}" for w in worlds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
