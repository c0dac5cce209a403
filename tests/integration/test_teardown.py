"""What a run builds is freed by reference counting when the run drops it: no reference cycle
of ours keeps an optimizer (and through it the process group, whose gloo threads run on) alive
until the interpreter's teardown, where C++ threads of a half-destroyed group can abort the
rank at exit."""

from __future__ import annotations

import gc
import weakref

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpbench import strategies
from ddpbench.core import timers
from ddpbench.core.params import CellParams
from ddpbench.run import models
from ddpbench.strategies.base import Context


def worker(rank: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        gc.disable()  # only reference counting may free it: a cycle would keep it
        params = CellParams.from_mapping({"strategy": "zero", "model": "mlp"})
        ctx = Context(params, 0, 1, torch.device("cpu"), timers.CommMeter(), timers.Clock("cpu"))
        ctx.instrument = True  # the timing wrapper on the parameter broadcast is what made the cycle
        strategy = strategies.get("zero")
        model = strategy.wrap(models.build("mlp", (3, 32, 32), 10), ctx)
        optimizer = strategy.make_optimizer(model, ctx)
        gone = weakref.ref(optimizer)
        del optimizer
        assert gone() is None, "the ZeRO optimizer outlived its last reference (a reference cycle)"
    finally:
        gc.enable()
        dist.destroy_process_group()


def test_the_zero_optimizer_is_freed_without_the_garbage_collector(tmp_path):
    mp.start_processes(worker, args=(str(tmp_path / "store"),), nprocs=1, join=True, start_method="spawn")
