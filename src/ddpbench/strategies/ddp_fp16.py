"""`ddp_fp16`: DDP whose buckets are all-reduced in float16 (`fp16_compress_hook`): half
the bytes on the wire, gradients rounded to fp16 (approximate). The bytes are measured
on the wire by DDP's `CountingGroup` (the compressed tensors), not assumed."""

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddpbench.strategies.ddp import DDP

SETTINGS = ("bucket_mb",)  # the strategy-specific cell parameters it reads


class DDPFp16(DDP):
    name = "ddp_fp16"
    exact = False

    def comm_hook(self, group, ctx):
        return group, default_hooks.fp16_compress_hook


STRATEGY = DDPFp16()
