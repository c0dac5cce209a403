"""`ring_allreduce`: the hand-written ring (reduce-scatter, then all-gather over
point-to-point send/recv, `ddpbench.comm.collectives`) on `bucket_mb` buckets after backward."""

from ddpbench.comm.collectives import ring_allreduce_, ring_allreduce_bytes_sent
from ddpbench.strategies.base import BucketedSum

SETTINGS = ("bucket_mb",)  # the strategy-specific cell parameters it reads


class RingAllReduce(BucketedSum):
    name = "ring_allreduce"
    point_to_point = True

    def reduce_sum_(self, flat, ctx):
        ring_allreduce_(flat)
        ctx.meter.add(1, ring_allreduce_bytes_sent(flat.numel(), flat.element_size(), ctx.world))


STRATEGY = RingAllReduce()
