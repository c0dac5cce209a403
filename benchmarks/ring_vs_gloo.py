"""The hand-written ring against gloo's own all_reduce: bus bandwidth of `ring_all_reduce`
(`ddpbench.comm.collectives.ring_allreduce_`) and `all_reduce` side by side in ONE commbench
sweep, per message size, their calls alternating (commbench --interleave), and their ratio
(target: ring/gloo >= 0.9 from 4 MiB at world size 2).

    python benchmarks/ring_vs_gloo.py [--world 2] [--min-mib 4] [--max-mib 64]
        [--iters 50] [--time-budget-s 1.0] [--segment-kib K] [--slots S] [--csv FILE]

It launches `torchrun --standalone --nproc-per-node WORLD` on this file, which runs
`ddpbench.comm.commbench --collectives all_reduce,ring_all_reduce` over doubling sizes from
--min-mib to --max-mib (float32, gloo on CPU, one thread per rank, every call checked for
exact sums; commbench's timing: barrier + max over ranks, median over the timed calls;
see docs/report.md, "Collective sweep"). Both collectives share the run, so the machine's
load hits both alike, call by call (--back-to-back: all sizes of gloo's, then the ring's,
as before); on a busy machine repeat the run and quote the spread, with the load average
it prints.

--segment-kib and --slots override the ring's pipeline (SEGMENT_BYTES, RECV_SLOTS in
ddpbench.comm.collectives) for that run: the way its defaults were chosen. To measure another
version of the ring, put its package first on PYTHONPATH; the header names the
collectives.py the ranks import.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import subprocess
import sys
import tempfile

MiB = 1 << 20


def child(argv: list[str]) -> int:
    """Under torchrun: set the ring's pipeline if asked, then run the commbench sweep."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--segment-kib", type=int, default=None)
    parser.add_argument("--slots", type=int, default=None)
    ours, rest = parser.parse_known_args(argv)
    from ddpbench.comm import collectives, commbench

    if ours.segment_kib is not None:
        collectives.SEGMENT_BYTES = ours.segment_kib * 1024
    if ours.slots is not None:
        collectives.RECV_SLOTS = ours.slots
    return commbench.main(rest)


def read_busbw(path: str) -> dict[tuple[str, int], float]:
    with open(path, newline="") as fh:
        return {(r["collective"], int(r["bytes"])): float(r["busbw_gbps"]) for r in csv.DictReader(fh)}


def main() -> int:
    if "RANK" in os.environ:
        return child(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--min-mib", type=int, default=4, help="smallest message in MiB (default 4)")
    parser.add_argument("--max-mib", type=int, default=64, help="largest message in MiB (default 64)")
    parser.add_argument("--iters", type=int, default=50, help="most timed calls per size (commbench)")
    parser.add_argument("--time-budget-s", type=float, default=1.0, help="timed seconds per size (commbench)")
    parser.add_argument("--segment-kib", type=int, default=None, help="ring segment size (default: the module's)")
    parser.add_argument("--slots", type=int, default=None, help="ring reduce-scatter slots (default: the module's)")
    parser.add_argument("--back-to-back", action="store_true",
                        help="measure gloo over every size, then the ring (before --interleave existed)")
    parser.add_argument("--csv", default=None, help="keep commbench's CSV here (default: a temporary file)")
    args = parser.parse_args()

    spec = importlib.util.find_spec("ddpbench.comm.collectives")
    origin = spec.origin if spec else "?"
    with tempfile.TemporaryDirectory() as tmp:
        out = args.csv or os.path.join(tmp, "comm.csv")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.world}"]
        cmd += [os.path.abspath(__file__), "--out", out, "--collectives", "all_reduce,ring_all_reduce"]
        cmd += ["--min-bytes", str(args.min_mib * MiB), "--max-bytes", str(args.max_mib * MiB)]
        cmd += ["--iters", str(args.iters), "--time-budget-s", str(args.time_budget_s), "--memcpy-bytes", "0"]
        if not args.back_to_back:  # calls alternate size by size: both see the same moments of the machine
            cmd.append("--interleave")
        if args.segment_kib is not None:
            cmd += ["--segment-kib", str(args.segment_kib)]
        if args.slots is not None:
            cmd += ["--slots", str(args.slots)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        load_before = os.getloadavg()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        load_after = os.getloadavg()
        if proc.returncode != 0:
            print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        busbw = read_busbw(out)

    pipeline = f"segment {args.segment_kib or 'default'} KiB, slots {args.slots or 'default'}"
    print(f"# ring_vs_gloo: world size {args.world}, gloo, float32, one commbench run; ring from {origin} ({pipeline})")
    print(f"# load average (1, 5, 15 min) before {'/'.join(f'{x:.2f}' for x in load_before)}, "
          f"after {'/'.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} cores")  # fmt: skip
    print(f"{'size':>8} {'gloo busbw':>11} {'ring busbw':>11} {'ring/gloo':>10}   (GB/s)")
    for nbytes in sorted({b for (c, b) in busbw if c == "all_reduce"}):
        gloo, ring = busbw[("all_reduce", nbytes)], busbw.get(("ring_all_reduce", nbytes), float("nan"))
        print(f"{nbytes / MiB:>4g} MiB {gloo:>11.3f} {ring:>11.3f} {ring / gloo:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
