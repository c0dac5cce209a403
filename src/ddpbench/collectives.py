"""Hand-written collectives over point-to-point send/recv.

`ring_allreduce_` is the bandwidth-optimal ring algorithm itself (reduce-scatter, then
all-gather, each p-1 steps of sending one chunk to the right neighbour and receiving one
from the left), not a call to `all_reduce`; the strategy and the collective sweep share it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce_(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum `tensor` over all ranks of `group` in place and return it.

    Each rank sends 2(p-1)/p of the tensor's bytes, the ring's optimum.
    """
    world = dist.get_world_size(group)
    if world == 1:
        return tensor
    rank = dist.get_rank(group)
    right = dist.get_global_rank(group, (rank + 1) % world) if group is not None else (rank + 1) % world
    left = dist.get_global_rank(group, (rank - 1) % world) if group is not None else (rank - 1) % world
    flat = tensor.view(-1)
    chunks = list(torch.tensor_split(flat, world))
    recv = torch.empty_like(chunks[0]) if chunks[0].numel() else torch.empty(0, dtype=flat.dtype, device=flat.device)

    def exchange(send_idx: int, recv_idx: int) -> torch.Tensor:
        buf = recv[: chunks[recv_idx].numel()]
        ops = [dist.P2POp(dist.isend, chunks[send_idx], right, group), dist.P2POp(dist.irecv, buf, left, group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return buf

    # Reduce-scatter: after p-1 steps rank r holds the full sum of chunk (r+1) % p.
    for step in range(world - 1):
        send_idx, recv_idx = (rank - step) % world, (rank - step - 1) % world
        chunks[recv_idx].add_(exchange(send_idx, recv_idx))
    # All-gather: pass the completed chunks around the ring.
    for step in range(world - 1):
        send_idx, recv_idx = (rank + 1 - step) % world, (rank - step) % world
        chunks[recv_idx].copy_(exchange(send_idx, recv_idx))
    return tensor


def ring_allreduce_bytes_sent(numel: int, element_size: int, world: int) -> int:
    """Bytes one rank sends in `ring_allreduce_` (for the communication meter)."""
    if world == 1:
        return 0
    sizes = [len(c) for c in torch.tensor_split(torch.empty(numel, dtype=torch.int8), world)]
    # Rank-averaged: every chunk is sent twice (p-1 times in each phase across ranks).
    return int(round(2 * (world - 1) * sum(sizes) / world)) * element_size
