"""`fsdp_grad_op`: FSDP2 with `reshard_after_forward=False`, ZeRO stage 2 (SHARD_GRAD_OP):
gradients and optimizer state sharded as in `fsdp`, but each block's parameters stay gathered
from its forward to its backward, so a step all-gathers each block once, not twice. The rest
(units, precision, how communication is counted and timed) is `fsdp`'s."""

from ddpbench.strategies.fsdp import FSDP

SETTINGS = ()  # the strategy-specific cell parameters it reads


class FSDPGradOp(FSDP):
    name = "fsdp_grad_op"
    comm_volume = "sharded_zero2"
    sharding = "zero2"  # as zero3 between steps; parameters stay gathered from forward to backward
    reshard_after_forward = False


STRATEGY = FSDPGradOp()
