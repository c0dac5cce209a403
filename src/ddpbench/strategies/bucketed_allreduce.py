"""`bucketed_allreduce`: gradients flattened into `bucket_mb` buckets, one blocking
all_reduce per bucket after backward: DDP's bucketing without its overlap."""

import torch.distributed as dist

from ddpbench.strategies.base import BucketedSum, allreduce_bytes, nbytes

SETTINGS = ("bucket_mb",)  # the strategy-specific cell parameters it reads


class BucketedAllReduce(BucketedSum):
    name = "bucketed_allreduce"

    def reduce_sum_(self, flat, ctx):
        dist.all_reduce(flat)
        ctx.meter.add(1, allreduce_bytes(nbytes(flat), ctx.world))


STRATEGY = BucketedAllReduce()
