"""Collective bandwidth sweep: time of each collective over message sizes, nccl-tests style.

    torchrun --standalone --nproc-per-node P -m ddpbench.comm.commbench --out comm.csv \\
        [--device cpu|cuda] [--min-bytes 4] [--max-bytes 67108864] [--iters 50] [--warmup 5] \\
        [--time-budget-s 1.0] [--collectives all_reduce,all_gather,reduce_scatter,broadcast,ring_all_reduce]

gloo on CPU, NCCL on CUDA, float32 buffers. Message sizes double from --min-bytes to
--max-bytes. For every (collective, size): --warmup untimed calls, then up to --iters
timed calls, fewer where the time budget per size is spent (at least --min-iters).
With --interleave the collectives are measured size by size, their calls alternating
(ABAB...) with one iteration count, so two collectives compared at a size saw the same
moments of the machine (without it: every size of one collective, then the next).
Every call is bracketed by a barrier and a device synchronisation; a call's time is the
maximum over ranks (the slowest rank sets the pace). Median and 95th percentile over the
timed calls go to the CSV with algbw = bytes / t and busbw = algbw x factor, exactly as
nccl-tests define them (see ddpbench.comm.commfit; for all_gather and reduce_scatter `bytes` is
the total buffer, p x the per-rank part, as in nccl-tests).

Every call's result (warm-up included) is checked against the exact expected values:
rank r's input is ``(i mod 251) + r + 1`` at element i, so sums are small integers,
exact in float32 whatever the reduction order, and misplaced chunks change the values.
Output buffers are overwritten with a sentinel before each call, so a call that does
nothing is caught too. A wrong value on any rank stops the sweep with an error naming
the collective, the size, the rank and the first wrong element (exit status 1).

The same run measures a plain memory copy (``dst.copy_(src)`` of --memcpy-bytes, by
default the largest message) on every rank at once, timed the same way, written as
collective ``memcpy``: bytes / t, where the copy reads and writes ``bytes`` once each.
It is the same-machine ceiling to compare the busbw of the largest messages with.

Rank 0 prints the table and writes the CSV (atomically) with the contract's columns.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from ddpbench.comm.collectives import ring_allreduce_
from ddpbench.comm.commfit import (
    COLLECTIVES,
    CSV_COLUMNS,
    MEMCPY,
    TOTAL_SIZE_COLLECTIVES,
    algbw_gbps,
    busbw_factor,
)

MiB = 1 << 20
DTYPE = torch.float32
ELEM = 4  # bytes per float32 element
PATTERN = 251  # period of the fill pattern (prime: chunk boundaries never align with it)
SENTINEL = -1.0  # written to output buffers before each call; never a valid result


class CollectiveCheckError(RuntimeError):
    """A collective returned a wrong value."""


@dataclass
class Case:
    """One (collective, size): how to reset the buffers, run the call and check its result."""

    collective: str
    nbytes: int  # reported size (nccl-tests convention)
    reset: Callable[[], None]
    run: Callable[[], None]
    result: Callable[[], torch.Tensor]
    expected: torch.Tensor


def fill(rank: int, n: int, device: torch.device, start: int = 0) -> torch.Tensor:
    """Rank `rank`'s deterministic input: element i (counting from `start`) = (i mod 251) + rank + 1."""
    idx = torch.arange(start, start + n, dtype=torch.int64, device=device)
    return ((idx % PATTERN) + (rank + 1)).to(DTYPE)


def summed(world: int, n: int, device: torch.device, start: int = 0) -> torch.Tensor:
    """Sum over ranks 0..world-1 of `fill(rank, n, start)`."""
    idx = torch.arange(start, start + n, dtype=torch.int64, device=device)
    return ((idx % PATTERN) * world + world * (world + 1) // 2).to(DTYPE)


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Doubling sizes from min_bytes to max_bytes inclusive (min rounded up to whole elements)."""
    if min_bytes < ELEM:
        raise ValueError(f"--min-bytes must be at least {ELEM} (one float32), got {min_bytes}")
    if max_bytes < min_bytes:
        raise ValueError(f"--max-bytes ({max_bytes}) must be >= --min-bytes ({min_bytes})")
    size, sizes = -(-min_bytes // ELEM) * ELEM, []
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def case_numel(collective: str, nbytes: int, world: int) -> int:
    """Elements of the reported buffer for a requested size (0: size too small to run).

    all_gather/reduce_scatter: the total buffer is rounded down to a multiple of p
    elements (as nccl-tests do), so every rank has the same whole part.
    """
    n = nbytes // ELEM
    if collective in TOTAL_SIZE_COLLECTIVES:
        n -= n % world
    return n


def make_case(collective: str, nbytes: int, rank: int, world: int, device: torch.device) -> Case | None:
    n = case_numel(collective, nbytes, world)
    if n == 0:
        return None
    size = n * ELEM
    if collective in ("all_reduce", "ring_all_reduce"):
        src, buf = fill(rank, n, device), torch.empty(n, dtype=DTYPE, device=device)
        op = dist.all_reduce if collective == "all_reduce" else ring_allreduce_
        return Case(collective, size, lambda: buf.copy_(src), lambda: op(buf), lambda: buf, summed(world, n, device))
    if collective == "broadcast":
        src, buf = fill(0, n, device), torch.empty(n, dtype=DTYPE, device=device)
        reset = (lambda: buf.copy_(src)) if rank == 0 else (lambda: buf.fill_(SENTINEL))
        return Case(collective, size, reset, lambda: dist.broadcast(buf, src=0), lambda: buf, src)
    m = n // world
    if collective == "all_gather":
        inp, out = fill(rank, m, device), torch.empty(n, dtype=DTYPE, device=device)
        expected = torch.cat([fill(r, m, device) for r in range(world)])
        return Case(
            collective, size, lambda: out.fill_(SENTINEL), lambda: dist.all_gather_into_tensor(out, inp), lambda: out, expected
        )
    if collective == "reduce_scatter":
        src, inp = fill(rank, n, device), torch.empty(n, dtype=DTYPE, device=device)
        out = torch.empty(m, dtype=DTYPE, device=device)

        def reset() -> None:
            inp.copy_(src)
            out.fill_(SENTINEL)

        return Case(
            collective,
            size,
            reset,
            lambda: dist.reduce_scatter_tensor(out, inp),
            lambda: out,
            summed(world, m, device, start=rank * m),
        )
    if collective == MEMCPY:
        src, dst = fill(rank, n, device), torch.empty(n, dtype=DTYPE, device=device)
        return Case(collective, size, lambda: dst.fill_(SENTINEL), lambda: dst.copy_(src), lambda: dst, src)
    raise ValueError(f"unknown collective {collective!r}")


def first_mismatch(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    """None if equal, else a description of the first wrong element."""
    if torch.equal(got, expected):
        return None
    bad = torch.nonzero(got != expected)
    i = int(bad[0, 0]) if len(bad) else 0
    return f"element {i} of {got.numel()} is {got[i].item()!r}, expected {expected[i].item()!r} ({len(bad)} wrong)"


class Sweep:
    """Runs cases on every rank in lockstep and gathers per-call times (max over ranks)."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int, device: torch.device):
        self.args, self.rank, self.world, self.device = args, rank, world, device
        self.inject = set(args.inject_error.split(",")) if args.inject_error else set()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()
        self.sync()

    def call(self, case: Case) -> tuple[float, str | None]:
        """One checked call: reset, barrier, timed call + sync, check. Returns (seconds, error)."""
        case.reset()
        self.barrier()
        start = time.perf_counter()
        case.run()
        self.sync()
        elapsed = time.perf_counter() - start
        result = case.result()
        if case.collective in self.inject and self.rank == self.world - 1:
            result.view(-1)[-1] += 1.0  # test hook: a deliberately wrong collective
        return elapsed, first_mismatch(result, case.expected)

    def agree_max(self, values: list[float]) -> list[float]:
        """Element-wise maximum over ranks."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def measure(self, cases: list[Case]) -> list[tuple[int, list[float]]]:
        """Warm up, pick the iteration count, time the calls; per case (iters, per-call max-over-rank
        times). Several cases (of one size) are measured together, their calls alternating (ABAB...):
        drift in the machine's speed hits them alike, so their ratio is steadier than from runs back
        to back. The same iteration count on every rank and for every case, from the slowest rank's
        fastest warm-up calls and the time budget of all the cases together."""
        a, n = self.args, len(cases)
        errors: list[str | None] = [None] * n
        warm: list[list[float]] = [[] for _ in cases]
        for _ in range(a.warmup):
            for i, case in enumerate(cases):
                sec, err = self.call(case)
                warm[i].append(sec)
                errors[i] = errors[i] or err
        agreed = self.agree_max([min(w) if w else 0.0 for w in warm] + [self.rank + 1.0 if e else 0.0 for e in errors])
        for case, failed_rank, error in zip(cases, agreed[n:], errors):
            self.raise_if_failed(case, failed_rank, error, "warm-up")
        iters, round_s = a.iters, sum(agreed[:n])
        if round_s > 0:
            iters = max(min(a.min_iters, a.iters), min(a.iters, int(n * a.time_budget_s / round_s)))
        times: list[list[float]] = [[] for _ in cases]
        for _ in range(iters):
            for i, case in enumerate(cases):
                sec, err = self.call(case)
                times[i].append(sec)
                errors[i] = errors[i] or err
        agreed = self.agree_max([t for ts in times for t in ts] + [self.rank + 1.0 if e else 0.0 for e in errors])
        for case, failed_rank, error in zip(cases, agreed[n * iters :], errors):
            self.raise_if_failed(case, failed_rank, error, "timed")
        return [(iters, agreed[i * iters : (i + 1) * iters]) for i in range(n)]

    def raise_if_failed(self, case: Case, failed_rank: float, error: str | None, phase: str) -> None:
        if failed_rank == 0:
            return
        where = f"{case.collective} at {case.nbytes} bytes (world size {self.world}, {phase} calls)"
        if error:
            raise CollectiveCheckError(f"wrong result of {where} on rank {self.rank}: {error}")
        raise CollectiveCheckError(f"wrong result of {where} on rank {int(failed_rank) - 1} (see that rank's message)")


def result_row(case: Case, backend: str, device: torch.device, world: int, iters: int, times: list[float]) -> dict:
    median = float(np.median(times))
    p95 = float(np.percentile(times, 95))
    alg = algbw_gbps(case.nbytes, median)
    return {
        "collective": case.collective,
        "backend": backend,
        "device": device.type,
        "world_size": world,
        "bytes": case.nbytes,
        "iters": iters,
        "time_median_s": median,
        "time_p95_s": p95,
        "algbw_gbps": alg,
        "busbw_gbps": alg * busbw_factor(case.collective, world),
    }


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def print_row(row: dict) -> None:
    print(
        f"{row['collective']:<16} {row['bytes']:>11} {human_bytes(row['bytes']):>10} {row['iters']:>6} "
        f"{row['time_median_s'] * 1e6:>12.1f} {row['time_p95_s'] * 1e6:>12.1f} "
        f"{row['algbw_gbps']:>9.3g} {row['busbw_gbps']:>9.3g}",
        flush=True,
    )


def write_csv(path: str, rows: list[dict]) -> None:
    import csv

    from ddpbench.core import safe_io

    # An unpredictable temporary, created exclusively, then moved in: no planted name is written
    with safe_io.atomic_write(path, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})


def parse_collectives(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    if names == ["all"]:
        return list(COLLECTIVES)
    bad = [c for c in names if c not in COLLECTIVES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown collective(s) {bad}; choose from {', '.join(COLLECTIVES)} or 'all'")
    return names


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun --standalone --nproc-per-node P -m ddpbench.comm.commbench",
        description="Sweep collective latency/bandwidth over doubling message sizes (nccl-tests definitions).",
    )
    p.add_argument("--out", required=True, help="CSV file to write (rank 0)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (gloo) or cuda (NCCL)")
    p.add_argument("--collectives", type=parse_collectives, default=list(COLLECTIVES), help="comma-separated, or 'all'")
    p.add_argument("--min-bytes", type=int, default=4, help="smallest message (bytes; default 4)")
    p.add_argument("--max-bytes", type=int, default=64 * MiB, help="largest message (bytes; default 64 MiB)")
    p.add_argument("--iters", type=positive_int, default=50, help="most timed calls per size (default 50)")
    p.add_argument("--min-iters", type=positive_int, default=5, help="fewest timed calls per size (default 5)")
    p.add_argument("--warmup", type=int, default=5, help="untimed (but checked) calls per size (default 5)")
    p.add_argument(
        "--time-budget-s",
        type=float,
        default=1.0,
        help="timed seconds per size: iters = clamp(budget / warm-up time, min-iters, iters) (default 1.0)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="measure the collectives size by size with their calls alternating, so a comparison of two "
        "(e.g. all_reduce,ring_all_reduce) is not a comparison of two moments of the machine",
    )
    p.add_argument(
        "--memcpy-bytes",
        type=int,
        default=None,
        help="size of the same-run memory-copy measurement (default: --max-bytes; 0: skip)",
    )
    p.add_argument(
        "--inject-error",
        default="",
        metavar="COLLECTIVE[,..]",
        help="testing only: corrupt one element of these collectives' results on the last rank",
    )
    return p


def init_distributed(device_kind: str) -> tuple[int, int, torch.device, str]:
    """Read the torchrun environment, pick the backend from the device, join the group."""
    if "RANK" not in os.environ:
        raise SystemExit("ddpbench commbench must run under torchrun (RANK/WORLD_SIZE are not set)")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device_kind == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device is available")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
        dist.init_process_group(backend, device_id=device)
    else:
        device, backend = torch.device("cpu"), "gloo"
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), device, backend


def run(args: argparse.Namespace) -> int:
    rank, world, device, backend = init_distributed(args.device)
    try:
        sizes = message_sizes(args.min_bytes, args.max_bytes)
        sweep = Sweep(args, rank, world, device)
        if rank == 0:
            print(
                f"# ddpbench commbench: backend {backend}, device {device.type}, world size {world}, "
                f"float32, torch {torch.__version__}, threads/rank {torch.get_num_threads()}, "
                f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start"
            )
            print(
                "# time = median / p95 over timed calls of the max over ranks; GB/s = 1e9 B/s; "
                "all_gather/reduce_scatter bytes = total buffer (nccl-tests)"
            )
            print(
                f"{'collective':<16} {'bytes':>11} {'size':>10} {'iters':>6} {'median (us)':>12} "
                f"{'p95 (us)':>12} {'algbw':>9} {'busbw':>9}",
                flush=True,
            )
        rows = []
        # Collective by collective over every size, or with --interleave size by size, the
        # collectives' calls alternating (each a list of cases measured together).
        if args.interleave:
            plan = [[(c, s) for c in args.collectives] for s in sizes]
        else:
            plan = [[(c, s)] for c in args.collectives for s in sizes]
        memcpy_bytes = args.max_bytes if args.memcpy_bytes is None else args.memcpy_bytes
        if memcpy_bytes > 0:
            plan.append([(MEMCPY, memcpy_bytes)])
        for group in plan:
            cases = [c for c in (make_case(collective, nbytes, rank, world, device) for collective, nbytes in group) if c]
            if not cases:
                continue
            for case, (iters, times) in zip(cases, sweep.measure(cases)):
                row = result_row(case, backend, device, world, iters, times)
                rows.append(row)
                if rank == 0:
                    print_row(row)
            del cases
        if rank == 0:
            write_csv(args.out, rows)
            print(f"# wrote {len(rows)} rows to {args.out} (load average {os.getloadavg()[0]:.2f} at end)", flush=True)
        dist.barrier()
        return 0
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.warmup < 0:
        build_parser().error(f"--warmup must be >= 0, got {args.warmup}")
    if args.time_budget_s <= 0:
        build_parser().error(f"--time-budget-s must be > 0, got {args.time_budget_s}")
    try:
        message_sizes(args.min_bytes, args.max_bytes)
    except ValueError as exc:
        build_parser().error(str(exc))
    try:
        return run(args)
    except CollectiveCheckError as exc:
        print(f"ddpbench commbench: error: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
