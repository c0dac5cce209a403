"""`allreduce`: one blocking all_reduce per parameter after backward (no bucketing, no
overlap): the naive scheme whose per-call latency bucketing exists to amortise."""

import torch.distributed as dist

from ddpbench.strategies.base import BucketedSum, allreduce_bytes, nbytes

SETTINGS = ()  # the strategy-specific cell parameters it reads


class AllReduce(BucketedSum):
    name = "allreduce"

    def groups(self, grads, ctx):
        return ([g] for g in grads)

    def reduce_sum_(self, flat, ctx):
        dist.all_reduce(flat)
        ctx.meter.add(1, allreduce_bytes(nbytes(flat), ctx.world))


STRATEGY = AllReduce()
