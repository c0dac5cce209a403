"""`ring_allreduce_` at world sizes 2 and 3 over gloo: the same values as `dist.all_reduce`
and the same bits as the ring's own summation order, for sizes that split unevenly, are
smaller than the world, are empty, or span several pipeline segments; through a
subgroup (group ranks are not global ranks); and identically for every segment size and
slot count and for the unpipelined step-by-step exchange. No timing asserts.

One spawned process group per world size runs every case (starting one costs seconds);
a failing rank raises with its case, and gloo's timeout turns a hang into a failure.
"""

from __future__ import annotations

import datetime
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpbench.comm import collectives
from ddpbench.comm.collectives import SEGMENT_BYTES, ring_allreduce_, ring_allreduce_bytes_sent

SEED = 1234
# Elements: empty, fewer than the world, uneven splits, around a small segment's edges,
# and (last) several default 1 MiB segments per chunk with an uneven tail.
SIZES = (0, 1, 2, 5, 7, 16, 17, 100, 1001, 4099, 3 * (SEGMENT_BYTES // 4) * 3 + 5)
# (segment_bytes, slots): one element per segment, tiny segments with 1..3 slots, default.
PIPELINES = ((4, 1), (28, 2), (64, 3), (4096, 2), (None, None))


def inputs(n: int, world: int, dtype: torch.dtype, case: int) -> list[torch.Tensor]:
    """Every rank's random input for one case (each rank can build all of them)."""
    out = []
    for r in range(world):
        g = torch.Generator().manual_seed(SEED + 1000 * case + r)
        out.append((torch.randn(n, generator=g, dtype=torch.float64) * 10 ** (3 * (r - 1))).to(dtype))
    return out


def ring_order_sum(xs: list[torch.Tensor]) -> torch.Tensor:
    """The ring's own summation order: chunk c starts at rank c and picks up rank c+1, c+2, ..."""
    world = len(xs)
    parts = [torch.tensor_split(x, world) for x in xs]
    out = []
    for c in range(world):
        acc = parts[c][c].clone()
        for j in range(1, world):
            acc = parts[(c + j) % world][c] + acc
        out.append(acc)
    return torch.cat(out)


def integer_inputs(n: int, rank: int) -> torch.Tensor:
    """Integer-valued floats: their sum is exact in any order, so all_reduce must match bit for bit."""
    return ((torch.arange(n, dtype=torch.int64) % 251) + rank + 1).to(torch.float32)


def check(what: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    if not torch.equal(got, expected):
        bad = torch.nonzero(got != expected).flatten()
        raise AssertionError(
            f"{what}: {len(bad)} of {got.numel()} elements differ, first at {int(bad[0])}: "
            f"{got.view(-1)[bad[0]].item()!r} != {expected.view(-1)[bad[0]].item()!r}"
        )


def worker(rank: int, world: int, store_path: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        case = 0
        for n in SIZES:
            # Equal to gloo's all_reduce (exact integer sums), 1-D and 2-D.
            x = integer_inputs(n, rank)
            expected = x.clone()
            dist.all_reduce(expected)
            got = x.clone()
            assert ring_allreduce_(got) is got
            check(f"n={n} vs all_reduce", got, expected)
            if n % 2 == 0 and n:
                got2 = x.clone().view(2, n // 2)
                ring_allreduce_(got2)
                check(f"n={n} 2-D vs all_reduce", got2.view(-1), expected)
            # The same bits as the ring order, for every pipeline shape and the stepwise path.
            for dtype in (torch.float32, torch.float64):
                case += 1
                xs = inputs(n, world, dtype, case)
                reference = ring_order_sum(xs)
                pipelines = PIPELINES if n < 10_000 else ((None, None), (SEGMENT_BYTES // 2 + 4, 1))
                for seg, slots in pipelines:
                    got = xs[rank].clone()
                    ring_allreduce_(got, segment_bytes=seg, slots=slots)
                    check(f"n={n} {dtype} segment_bytes={seg} slots={slots} vs ring order", got, reference)
                got = xs[rank].clone()
                collectives._ring_stepwise(got, None)
                check(f"n={n} {dtype} stepwise vs ring order", got, reference)
        # A subgroup of ranks {0, last}: the ring must address its neighbours by group rank.
        members = [0, world - 1]
        sub = dist.new_group(members)
        if rank in members:
            for n in (0, 3, 1001):
                x = integer_inputs(n, rank)
                expected = x.clone()
                dist.all_reduce(expected, group=sub)
                got = x.clone()
                ring_allreduce_(got, group=sub, segment_bytes=64, slots=2)
                check(f"subgroup {members} n={n} vs all_reduce", got, expected)
                got = x.clone()
                collectives._ring_stepwise(got, sub)
                check(f"subgroup {members} n={n} stepwise vs all_reduce", got, expected)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_ring_allreduce_matches_all_reduce_and_ring_order(world, tmp_path):
    mp.start_processes(worker, args=(world, str(tmp_path / "store")), nprocs=world, join=True, start_method="spawn")


def test_ring_order_reference_is_not_all_reduce_order():
    """The bitwise test above can fail: with these inputs the summation order changes bits."""
    xs = inputs(4099, 3, torch.float32, 1)
    left_to_right = xs[0] + xs[1] + xs[2]
    assert not torch.equal(ring_order_sum(xs), left_to_right)


@pytest.mark.parametrize("numel,world,expected_elements", [(0, 2, 0), (1, 2, 1), (10, 2, 10), (10, 3, 13), (1, 3, 1)])
def test_bytes_sent_is_rank_averaged_two_p_minus_one_over_p(numel, world, expected_elements):
    assert ring_allreduce_bytes_sent(numel, 4, world) == 4 * expected_elements
