"""`gather_scatter`: parameter-server style. Every rank sends its gradient buckets to rank 0,
which sums them and sends the result back to each rank, all over point-to-point messages,
so rank 0's link carries (p-1) times what a worker's does (the bottleneck this scheme
is known for) and the byte counts are exact."""

import torch
import torch.distributed as dist

from ddpbench.strategies.base import BucketedSum, nbytes

SETTINGS = ("bucket_mb",)  # the strategy-specific cell parameters it reads

ROOT = 0


class GatherScatter(BucketedSum):
    name = "gather_scatter"
    comm_volume = "gather_scatter"
    schedule = "root"
    point_to_point = True

    def reduce_sum_(self, flat, ctx):
        others = [r for r in range(ctx.world) if r != ROOT]
        if ctx.rank == ROOT:
            bufs = [torch.empty_like(flat) for _ in others]
            for req in [dist.irecv(buf, src=r) for r, buf in zip(others, bufs)]:
                req.wait()
            for buf in bufs:  # fixed order: the sum is the same on every run
                flat.add_(buf)
            for req in [dist.isend(flat, dst=r) for r in others]:
                req.wait()
            ctx.meter.add(2, len(others) * nbytes(flat))
        else:
            dist.send(flat, dst=ROOT)
            dist.recv(flat, src=ROOT)
            ctx.meter.add(2, nbytes(flat))


STRATEGY = GatherScatter()
