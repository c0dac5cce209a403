"""`zero`: DDP with `ZeroRedundancyOptimizer` (ZeRO stage 1): each rank keeps the optimizer
state (SGD momentum) of its own shard of the parameters only, steps that shard, and
broadcasts the updated shard to the others. Exact: the same update as `ddp`.

The shards are whole parameters, assigned greedily by size (torch's partition), so a
model dominated by one large layer cannot split its state evenly: the summary reports
each rank's optimizer-state bytes (extra.optimizer_state_bytes = the largest rank,
..._total = their sum, equal to ddp's per-rank bytes). The broadcast happens inside
`optimizer.step()` (timed as optimizer); its bytes are counted after the step: a rank
sends its own shard once per step (ring broadcast convention), and takes part in one
broadcast per parameter.
"""

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer

from ddpbench.strategies.base import nbytes, state_bytes
from ddpbench.strategies.ddp import DDP


class Zero(DDP):
    name = "zero"

    def make_optimizer(self, model, ctx):
        return ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.SGD, lr=ctx.params.lr, momentum=ctx.params.momentum
        )

    def after_step(self, model, optimizer, ctx):
        shards = optimizer._partition_parameters()  # per rank: param groups
        calls = sum(len(g["params"]) for shard in shards for g in shard)
        ctx.meter.add(calls, sum(nbytes(p) for g in shards[ctx.rank] for p in g["params"]))

    def optimizer_state_bytes(self, optimizer):
        return state_bytes(optimizer.optim)


STRATEGY = Zero()
