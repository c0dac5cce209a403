"""A cell's numeric precision inside a rank: the matmul modes (`configure`) and fp16's dynamic
loss scale (`LossScaler`). Autocast itself is the strategy context's (strategies.base.Context
.autocast), so every strategy's forward runs in the cell's precision the same way.

fp32 means IEEE fp32 everywhere, on CUDA too: TF32 is switched off for matmuls and cuDNN
convolutions (torch leaves cuDNN's on by default), and on only for `tf32`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ddpbench.core.params import CellParams
from ddpbench.strategies.base import local_nbytes


def configure(params: CellParams, device: torch.device) -> None:
    """Set the process-wide matmul precision for the cell (before the model runs)."""
    if device.type == "cuda":
        tf32 = params.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32


class LossScaler:
    """Dynamic loss scaling for fp16, torch.amp.GradScaler's rule: the loss is multiplied by
    `scale` before backward; after the gradients are synchronised they are divided by it
    and checked; a step with an inf/NaN gradient is skipped and the scale halved; after
    `interval` good steps in a row it doubles. Written out rather than GradScaler because
    a sharded strategy's ranks each see only their shard of the gradients: they must agree
    on an overflow (one all-reduce of a flag), or one rank would skip a step the others
    take. Disabled (scale 1, no check) for every precision but fp16."""

    def __init__(self, enabled: bool, init: float = 2.0**16, growth: float = 2.0, backoff: float = 0.5, interval: int = 2000):
        self.enabled = enabled
        self.scale = init if enabled else 1.0
        self.growth, self.backoff, self.interval = growth, backoff, interval
        self.good_steps = 0
        self.skipped = 0

    def unscale(self, module: nn.Module, agree: bool, meter=None) -> bool:
        """Divide the gradients by the scale; False if any is not finite (skip the step).
        `agree`: the ranks hold different shards, so they all-reduce the verdict."""
        if not self.enabled:
            return True
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        bad = torch.zeros((), device=local[0].device if local else "cpu")
        for g in local:
            bad = torch.maximum(bad, (~torch.isfinite(g)).any().to(bad.dtype))
        if agree and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
            if meter is not None:
                meter.add(1, local_nbytes(bad))
        if bool(bad):
            self.scale *= self.backoff
            self.good_steps = 0
            self.skipped += 1
            return False
        with torch.no_grad():
            for g in local:
                g.mul_(1.0 / self.scale)
        self.good_steps += 1
        if self.good_steps == self.interval:
            self.scale *= self.growth
            self.good_steps = 0
        return True
