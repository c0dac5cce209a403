"""`zero`: DDP with `ZeroRedundancyOptimizer` (ZeRO stage 1): each rank keeps the optimizer
state (SGD momentum, AdamW's two moments) of its own shard of the parameters only, steps that shard, and
broadcasts the updated shard to the others. Exact: the same update as `ddp`.

The shards are whole parameters, assigned greedily by size (torch's partition), so a
model dominated by one large layer cannot split its state evenly: the summary reports
each rank's optimizer-state bytes (extra.optimizer_state_bytes = the largest rank,
..._total = their sum, equal to ddp's per-rank bytes).

The parameter broadcast happens inside `optimizer.step()`; it is timed apart (torch's
`_sync_params`, wrapped) and reported as blocking communication, not optimizer time.
Its bytes follow the all-gather convention of nccl-tests (busbw = algbw·(p−1)/p): the
broadcasts of all shards together move every parameter to every rank, which costs each
rank (p−1)/p of the model's bytes in a ring; one call per parameter.
"""

import weakref

from torch.distributed.optim import ZeroRedundancyOptimizer

from ddpbench.strategies.base import nbytes, optimizer_class, state_bytes, timed_blocking
from ddpbench.strategies.ddp import DDP

SETTINGS = ("bucket_mb",)  # the strategy-specific cell parameters it reads


class Zero(DDP):
    name = "zero"
    comm_volume = "allreduce_allgather"
    sharding = "zero1"  # the optimizer state

    def make_optimizer(self, model, ctx):
        parameters = list(model.parameters())
        cls, kwargs = optimizer_class(ctx.params, parameters)
        opt = ZeroRedundancyOptimizer(parameters, optimizer_class=cls, **kwargs)
        if ctx.instrument:
            # Through a weak reference: the optimizer holding a closure over its own bound
            # method would be a reference cycle, keeping it (and its gloo process group, whose
            # threads run on) alive past destroy_process_group until the interpreter's teardown.
            sync = weakref.WeakMethod(opt._sync_params)
            opt._sync_params = timed_blocking(lambda: sync()(), ctx, "optimizer")
        return opt

    def after_step(self, model, optimizer, ctx):
        params = [p for g in optimizer.param_groups for p in g["params"]]
        total = sum(nbytes(p) for p in params)
        ctx.meter.add(len(params), int(round(total * (ctx.world - 1) / ctx.world)))

    def optimizer_state_bytes(self, optimizer):
        return state_bytes(optimizer.optim)


STRATEGY = Zero()
