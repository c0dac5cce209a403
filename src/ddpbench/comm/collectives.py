"""Hand-written collectives over point-to-point send/recv.

`ring_allreduce_` is the bandwidth-optimal ring algorithm itself (reduce-scatter, then
all-gather, each p-1 steps of sending one chunk to the right neighbour and receiving one
from the left), not a call to `all_reduce`; the strategy and the collective sweep share it.

On gloo the ring is pipelined the way gloo's own all_reduce is: every chunk travels in
segments of at most `SEGMENT_BYTES`, so the reduction of one segment overlaps the
transfer of the next, and a segment is passed on to the next step as soon as it is ready
(no barrier between steps or phases). Reduce-scatter segments land in `RECV_SLOTS`
scratch slots allocated once per (device, dtype) and kept (up to 8 MiB by default: a fresh
receive buffer per call cost more in page faults than the transfer itself); all-gather
segments land directly in their place in the tensor. Each element is still summed in
ring order, exactly as the unpipelined ring does: the result is the same bits, only the
schedule changed. Other backends (NCCL,
which neither matches messages by tag nor runs unbatched sends and receives between the
same two ranks concurrently) use the plain step-by-step exchange.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# Chosen by measurement on the 2-core VM (docs/report.md, "The ring against gloo's
# all_reduce"): 2 MiB x 4 slots was the best of 0.25-8 MiB x 1-8 slots from 4 to 64 MiB;
# smaller segments lose to per-message costs (gloo's send/recv handshake, thread wake-ups);
# 1 MiB x 2 (gloo's own all_reduce's choice) reached 0.66-1.03x gloo.
SEGMENT_BYTES = 2 << 20
RECV_SLOTS = 4
MIN_SPLIT_BYTES = 1 << 20  # a chunk is cut in two (or more) only into segments at least this big

# Reduce-scatter receive slots, reused across calls: (device, dtype) -> 1-D buffer.
_scratch: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _scratch_buffer(numel: int, like: torch.Tensor) -> torch.Tensor:
    key = (like.device, like.dtype)
    buf = _scratch.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=like.dtype, device=like.device)
        _scratch[key] = buf
    return buf[:numel]


def ring_allreduce_(
    tensor: torch.Tensor,
    group: dist.ProcessGroup | None = None,
    *,
    segment_bytes: int | None = None,
    slots: int | None = None,
) -> torch.Tensor:
    """Sum `tensor` over all ranks of `group` in place and return it.

    Each rank sends 2(p-1)/p of the tensor's bytes, the ring's optimum. Chunk c (the
    c-th of `torch.tensor_split(tensor.view(-1), p)`) is summed starting at rank c and
    going right: x_c, then x_{c+1} + x_c, then x_{c+2} + (x_{c+1} + x_c), ...
    `segment_bytes` and `slots` (reduce-scatter receives in flight; default: the
    module's SEGMENT_BYTES and RECV_SLOTS, read at call time) tune the gloo pipeline;
    they change the schedule, never the result.
    """
    world = dist.get_world_size(group)
    if world == 1:
        return tensor
    segment_bytes = SEGMENT_BYTES if segment_bytes is None else segment_bytes
    slots = RECV_SLOTS if slots is None else slots
    if segment_bytes < 1 or slots < 1:
        raise ValueError(f"segment_bytes and slots must be >= 1, got {segment_bytes} and {slots}")
    flat = tensor.view(-1)
    backend = str(dist.get_backend(group))
    if flat.device.type == "cpu" and (backend == "gloo" or "cpu:gloo" in backend):
        _ring_pipelined(flat, group, segment_bytes, slots)
    else:
        _ring_stepwise(flat, group)
    return tensor


def _send_chunk(rank: int, world: int, step: int) -> int:
    """Index of the chunk `rank` sends at `step` (reduce-scatter steps 0..p-2, then all-gather)."""
    rs = world - 1
    return (rank - step) % world if step < rs else (rank + 1 - (step - rs)) % world


def _recv_chunk(rank: int, world: int, step: int) -> int:
    """Index of the chunk `rank` receives at `step`; it is the one it sends at step + 1."""
    rs = world - 1
    return (rank - step - 1) % world if step < rs else (rank - (step - rs)) % world


def _ring_pipelined(flat: torch.Tensor, group: dist.ProcessGroup | None, segment_bytes: int, slots: int) -> None:
    """The segmented ring over gloo's tag-matched, non-blocking send/recv.

    Schedule per rank: post the first `slots` reduce-scatter receives into scratch slots,
    send every segment of the own chunk, post every all-gather receive (straight into the
    tensor, tagged by step so gloo matches them apart from the reduce-scatter traffic).
    Then take the received segments in (step, segment) order: reduce a reduce-scatter
    segment into its chunk, re-post its slot for the next receive, and send the segment
    on at once as part of the next step.

    Receiving all-gather segments into the tensor while reduce-scatter sends of the same
    region may still be queued is safe by causality: the segment that arrives there is
    the full sum of that region, which the ring can only have formed after the
    neighbour received every byte this rank sent from it.
    """
    pg = group if group is not None else dist.group.WORLD
    world, rank = pg.size(), pg.rank()
    right, left = (rank + 1) % world, (rank - 1) % world
    rs_steps, steps = world - 1, 2 * (world - 1)
    chunks = torch.tensor_split(flat, world)
    # At least two segments per chunk once they can be >= 1 MiB (as gloo splits), so the
    # all-gather of the first overlaps the reduce-scatter of the second; the same on every rank.
    elem, longest = flat.element_size(), max(c.numel() for c in chunks)
    seg = max(1, min(segment_bytes // elem, max(-(-longest // 2), MIN_SPLIT_BYTES // elem)))

    def segments(c: int) -> list[torch.Tensor]:
        chunk = chunks[c]
        return [chunk[i : i + seg] for i in range(0, chunk.numel(), seg)]

    recv_segs = [segments(_recv_chunk(rank, world, s)) for s in range(steps)]
    rs_order = [(s, k) for s in range(rs_steps) for k in range(len(recv_segs[s]))]
    slot_len = min(seg, longest)
    scratch = _scratch_buffer(slots * slot_len, flat) if rs_order else flat[:0]
    pending: dict[tuple[int, int], tuple[dist.Work, torch.Tensor | None]] = {}

    def post_rs(i: int) -> None:
        s, k = rs_order[i]
        start = (i % slots) * slot_len
        buf = scratch[start : start + recv_segs[s][k].numel()]
        pending[(s, k)] = (pg.recv([buf], left, s), buf)

    for i in range(min(slots, len(rs_order))):
        post_rs(i)
    sends = [pg.send([x], right, 0) for x in segments(_send_chunk(rank, world, 0))]
    for s in range(rs_steps, steps):
        for k, dst in enumerate(recv_segs[s]):
            pending[(s, k)] = (pg.recv([dst], left, s), None)
    done = 0  # reduce-scatter receives completed
    for s in range(steps):
        for k, dst in enumerate(recv_segs[s]):
            work, buf = pending.pop((s, k))
            work.wait()
            if buf is not None:
                dst.add_(buf)
                if done + slots < len(rs_order):
                    post_rs(done + slots)  # the slot `buf` lives in is free again
                done += 1
            if s + 1 < steps:
                sends.append(pg.send([dst], right, s + 1))
    for work in sends:
        work.wait()


def _ring_stepwise(flat: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    """One batched send/recv of a whole chunk per step (any backend, NCCL included)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    right = dist.get_global_rank(group, (rank + 1) % world) if group is not None else (rank + 1) % world
    left = dist.get_global_rank(group, (rank - 1) % world) if group is not None else (rank - 1) % world
    chunks = torch.tensor_split(flat, world)
    recv = _scratch_buffer(max(c.numel() for c in chunks), flat)
    for step in range(2 * (world - 1)):
        send, dst = chunks[_send_chunk(rank, world, step)], chunks[_recv_chunk(rank, world, step)]
        buf = recv[: dst.numel()] if step < world - 1 else dst  # all-gather: straight into place
        ops = [dist.P2POp(dist.isend, send, right, group), dist.P2POp(dist.irecv, buf, left, group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        if step < world - 1:
            dst.add_(buf)


def ring_allreduce_bytes_sent(numel: int, element_size: int, world: int) -> int:
    """Bytes one rank sends in `ring_allreduce_` (for the communication meter)."""
    if world == 1:
        return 0
    sizes = [len(c) for c in torch.tensor_split(torch.empty(numel, dtype=torch.int8), world)]
    # Rank-averaged: every chunk is sent twice (p-1 times in each phase across ranks).
    return int(round(2 * (world - 1) * sum(sizes) / world)) * element_size
