"""How fast can any send/recv ring be on gloo? The hand ring against what its transfers alone cost.

    python benchmarks/ring_ceiling.py [--world 2] [--sizes-mib 4,8,16,64] [--iters 40]

Under `torchrun --standalone --nproc-per-node WORLD` (it launches itself), per message size
M (float32, one thread per rank), calls alternating round by round so the machine's state
hits every variant alike; each call timed from a barrier, max over ranks, median of --iters:

  gloo all_reduce     dist.all_reduce(M), gloo's own algorithm
  hand ring           ddpbench.collectives.ring_allreduce_ (segmented, pipelined, exact)
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
import time

MiB = 1 << 20
_RECV: dict = {}  # receive buffer of `ring_transfers`, per message size


def ring_transfers(flat, pg, world: int, rank: int) -> None:
    """2(p-1) steps: send chunk to the right, receive one from the left, wait, next step."""
    import torch

    right, left = (rank + 1) % world, (rank - 1) % world
    chunks = torch.tensor_split(flat, world)
    recv = _RECV.get(flat.numel())
    if recv is None:  # allocated once per size, as the hand ring keeps its scratch buffer
        recv = _RECV[flat.numel()] = torch.empty(chunks[0].numel(), dtype=flat.dtype)
    for step in range(2 * (world - 1)):
        send = chunks[(rank - step) % world]
        dst = recv[: chunks[(rank - step - 1) % world].numel()]
        works = [pg.send([send], right, step), pg.recv([dst], left, step)]
        for w in works:
            w.wait()


def one_exchange(flat, other, pg, world: int, rank: int) -> None:
    works = [pg.send([flat], (rank + 1) % world, 99), pg.recv([other], (rank - 1) % world, 99)]
    for w in works:
        w.wait()


def child(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from ddpbench import collectives

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    pg, world, rank = dist.group.WORLD, dist.get_world_size(), dist.get_rank()
    rows = []
    for mib in args.sizes_mib:
        n = mib * MiB // 4
        x = torch.full((n,), float(rank + 1))
        other = torch.empty(n)
        variants = {
            "gloo all_reduce": lambda: dist.all_reduce(x),
            "hand ring": lambda: collectives.ring_allreduce_(x),
            "ring transfers": lambda: ring_transfers(x, pg, world, rank),
            "one exchange": lambda: one_exchange(x, other, pg, world, rank),
        }
        times = {name: [] for name in variants}
        for i in range(args.iters + 3):  # 3 untimed rounds first
            for name, fn in variants.items():
                x.fill_(float(rank + 1))
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                elapsed = torch.tensor([time.perf_counter() - t0])
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                if i >= 3:
                    times[name].append(elapsed.item())
                if name in ("gloo all_reduce", "hand ring"):  # the two that must be exact
                    expected = float(world * (world + 1) // 2)
                    if not bool((x == expected).all()):
                        raise SystemExit(f"{name} gave a wrong sum at {mib} MiB")
        med = {name: statistics.median(v) for name, v in times.items()}
        rows.append((mib, med))
    if rank == 0:
        print(f"# ring_ceiling: world {world}, gloo on CPU, 1 thread per rank, median of {args.iters} calls, interleaved")
        print(f"# load average before/after (1 min): {args.load_before} / {os.getloadavg()[0]:.2f}")
        names = list(rows[0][1])
        print(f"{'MiB':>5} " + " ".join(f"{n + ' [ms]':>20}" for n in names) + "   relative to gloo all_reduce")
        for mib, med in rows:
            rel = " ".join(f"{med[n] / med['gloo all_reduce']:.2f}" for n in names[1:])
            print(f"{mib:>5} " + " ".join(f"{med[n] * 1e3:>20.3f}" for n in names) + f"   {rel}")
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
