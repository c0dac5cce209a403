"""How fast can any send/recv ring be on gloo? The hand ring against what its transfers alone cost.

    python benchmarks/ring_ceiling.py [--world 2] [--sizes-mib 4,8,16,64] [--iters 40]

Under `torchrun --standalone --nproc-per-node WORLD` (it launches itself), per message size
M (float32, one thread per rank), measured by commbench's Sweep: calls alternating round by
round so the machine's state hits every variant alike, each from a barrier, max over ranks,
median of --iters; the two all-reduces checked for exact sums on every call:

  gloo all_reduce     dist.all_reduce(M), gloo's own algorithm
  hand ring           ddpbench.comm.collectives.ring_allreduce_ (segmented, pipelined, exact)
  ring transfers      the same sends and receives as a 2(p-1)-step ring, step after step,
                      without any reduction or copy: the floor of a ring built from
                      gloo's send/recv that does no arithmetic at all
  one exchange        every rank sends M to its right neighbour and receives M from its left
                      at once (the bytes of a p = 2 all-reduce in one round, no dependency)

and each one's time relative to gloo's all_reduce (>1: slower). If "ring transfers" is
already slower than gloo's all_reduce / 0.9 at a size, no ring over these send/recv calls can
reach 0.9x gloo there: the gap is in the transport, not in the ring's arithmetic.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

MiB = 1 << 20


def transfer_case(name: str, nbytes: int, rank: int, world: int, steps: int):
    """A commbench Case that only moves bytes: `steps` rounds of sending 1/parts of a buffer to the
    right and receiving as much from the left (nothing to check: its result is its own buffer)."""
    import torch
    import torch.distributed as dist

    from ddpbench.comm.commbench import Case

    pg = dist.group.WORLD
    right, left = (rank + 1) % world, (rank - 1) % world
    parts = world if steps > 1 else 1  # a ring moves a chunk per step; one exchange moves it all
    flat = torch.zeros(nbytes // 4)
    chunks = torch.tensor_split(flat, parts)
    recv = torch.empty(chunks[0].numel())

    def run() -> None:
        for step in range(steps):  # step after step, as a ring must: it sends what it received
            send, dst = chunks[(rank - step) % parts], recv[: chunks[(rank - step - 1) % parts].numel()]
            for work in [pg.send([send], right, step), pg.recv([dst], left, step)]:
                work.wait()

    return Case(name, nbytes, lambda: None, run, lambda: recv, recv)


def child(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from ddpbench.comm import commbench

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    # Exactly --iters timed calls per variant (min_iters = iters: the time budget never trims them).
    sweep_args = argparse.Namespace(warmup=3, iters=args.iters, min_iters=args.iters, time_budget_s=0.0, inject_error=None)
    sweep = commbench.Sweep(sweep_args, rank, world, torch.device("cpu"))
    rows = []
    for mib in args.sizes_mib:
        nbytes = mib * MiB
        cases = [
            commbench.make_case("all_reduce", nbytes, rank, world, torch.device("cpu")),
            commbench.make_case("ring_all_reduce", nbytes, rank, world, torch.device("cpu")),
            transfer_case("ring transfers", nbytes, rank, world, steps=2 * (world - 1)),
            transfer_case("one exchange", nbytes, rank, world, steps=1),
        ]
        rows.append((mib, [statistics.median(times) for _, times in sweep.measure(cases)]))
    if rank == 0:
        names = ["gloo all_reduce", "hand ring", "ring transfers", "one exchange"]
        print(f"# ring_ceiling: world {world}, gloo on CPU, 1 thread per rank, median of {args.iters} calls, interleaved")
        print(f"# load average before/after (1 min): {args.load_before} / {os.getloadavg()[0]:.2f}")
        print(f"{'MiB':>5} " + " ".join(f"{n + ' [ms]':>20}" for n in names) + "   relative to gloo all_reduce")
        for mib, med in rows:
            rel = " ".join(f"{t / med[0]:.2f}" for t in med[1:])
            print(f"{mib:>5} " + " ".join(f"{t * 1e3:>20.3f}" for t in med) + f"   {rel}")
    dist.destroy_process_group()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--sizes-mib", type=lambda s: [int(v) for v in s.split(",")], default=[4, 8, 16, 64])
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--load-before", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if any(v < 1 for v in args.sizes_mib) or args.iters < 1 or args.world < 2:
        parser.error("--sizes-mib values and --iters must be >= 1, --world >= 2")
    if "RANK" in os.environ:
        return child(args)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.world),
           __file__, "--sizes-mib", ",".join(map(str, args.sizes_mib)), "--iters", str(args.iters),
           "--load-before", f"{os.getloadavg()[0]:.2f}"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
