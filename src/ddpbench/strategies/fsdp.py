"""`fsdp`: fully sharded data parallelism, PyTorch's FSDP2 (`fully_shard`), ZeRO stage 3.

Every rank holds 1/p of each parameter, of its gradient and of the optimizer state (dim-0
shards, padded to a multiple of p). `fully_shard` is applied to each block of the model
(`blocks`: the children that hold parameters, containers opened) and then to the root, with
`reshard_after_forward=True`: a block's parameters are all-gathered before its forward,
freed after it, all-gathered again before its backward, and its gradients are
reduce-scattered after it. `fsdp_grad_op` (ZeRO-2) keeps them gathered from forward to
backward: one all-gather fewer per block and step, for the gathered parameters' memory.
Exact: the same update as `single` (the ranks' shards of it).

Precision: bf16/fp16 use FSDP's MixedPrecisionPolicy, parameters gathered and computed in
the low precision, gradients reduce-scattered in fp32 (the sharded parameters and the
optimizer stay fp32).

Communication is measured where it is issued: FSDP's all-gather and reduce-scatter are
replaced (its public set_custom_all_gather / set_custom_reduce_scatter) by the same calls
wrapped to count them, in nccl-tests' ring convention (a rank sends (p-1)/p of the
all-gather's output and of the reduce-scatter's input), and to time them. FSDP issues them
synchronously (`unshard_async_op` False): on CPU with gloo each call holds the training
thread until it is done, so all of it is exposed communication, charged to the phase it
ran in (forward, or backward for the re-gathers and the reduce-scatters). On CUDA the
calls run on FSDP's own streams: their duration is stamped there and counted as
communication, and their exposed share is not separated (extra.exposed_comm_measured
false: the step's phases keep the overlap, docs/metrics.md).
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn

from ddpbench.strategies.base import Context, Strategy, timed_blocking

SETTINGS = ()  # the strategy-specific cell parameters it reads

LOW_PRECISION = {"bf16": torch.bfloat16, "fp16": torch.float16}


def blocks(model: nn.Module) -> list[nn.Module]:
    """The units FSDP shards one by one: the model's own `fsdp_units()` where it has one (a
    GPT's blocks: its tied embedding is used again by the head, so it must stay in the
    root's unit), else its children that hold parameters, with containers (Sequential,
    ModuleList) opened, so a stack of layers becomes one unit per layer."""
    if hasattr(model, "fsdp_units"):
        return list(model.fsdp_units())
    units = []
    for child in model.children():
        if isinstance(child, (nn.Sequential, nn.ModuleList)):
            units += blocks(child)
        elif any(True for _ in child.parameters()):
            units.append(child)
    return units


def ring_bytes(t: torch.Tensor, world: int) -> int:
    """Bytes a rank sends for an all-gather of output `t` or a reduce-scatter of input `t`."""
    return int(round(t.numel() * t.element_size() * (world - 1) / world))


class FSDP(Strategy):
    name = "fsdp"
    comm_volume = "sharded_zero3"
    imports_dynamo = True
    sharded_gradients = True
    reshard_after_forward = True

    def wrap(self, model, ctx):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        low = LOW_PRECISION.get(ctx.params.precision)
        policy = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32) if low else MixedPrecisionPolicy()
        mesh = init_device_mesh(ctx.device.type, (ctx.world,))
        ctx.state["skeleton"] = skeleton(model)
        model._ddpbench_state = ctx.state  # for `bare` (a dict: not registered as a submodule)
        units = blocks(model)
        for unit in units:
            fully_shard(unit, mesh=mesh, reshard_after_forward=self.reshard_after_forward, mp_policy=policy)
        fully_shard(model, mesh=mesh, reshard_after_forward=self.reshard_after_forward, mp_policy=policy)
        ctx.state["fsdp_units"] = len(units)
        if ctx.instrument:
            counted = counting_collectives(ctx)
            for unit in [*units, model]:
                if unit._get_fsdp_state()._fsdp_param_groups:  # a unit with parameters of its own
                    unit.set_custom_all_gather(counted[0])
                    unit.set_custom_reduce_scatter(counted[1])
        return model

    def accumulating(self, model, ctx, last):
        model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def bare(self, model):
        """A plain copy of the model with the full parameters (all-gathered from the shards;
        every rank calls this at the same point): what evaluation and the checks read."""
        from torch.distributed.tensor import DTensor

        ctx_state = model._ddpbench_state
        plain = ctx_state.get("bare")
        if plain is None:
            full = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()}
            plain = ctx_state["skeleton"].to_empty(device=next(iter(full.values())).device)
            plain.load_state_dict(full)
            ctx_state["bare"] = plain
        return plain

    def extra(self, model, ctx):
        return {
            "fsdp_units": ctx.state.get("fsdp_units"),
            "reshard_after_forward": self.reshard_after_forward,
            "exposed_comm_measured": ctx.device.type == "cpu",
        }


def skeleton(model: nn.Module) -> nn.Module:
    """A copy of `model`'s structure with its parameters and buffers on the meta device (no
    memory): `bare` fills it with the full parameters after training."""
    memo = {}
    for t in [*model.parameters(), *model.buffers()]:
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
    return copy.deepcopy(model, memo)


def counting_collectives(ctx: Context):
    """FSDP's all-gather and reduce-scatter, counted (calls, ring bytes) and timed."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

    cpu = ctx.device.type == "cpu"

    def timed(call, phase):
        if cpu:
            return timed_blocking(call, ctx, phase)()

        def account_overlapped():
            a = ctx.clock.stamp()  # on FSDP's communication stream (the current one here)
            result = call()
            b = ctx.clock.stamp()
            ctx.meter.defer(lambda clock, meter: meter.overlapped(clock.elapsed(a, b), 0.0, phase))
            return result

        return account_overlapped()

    class CountingAllGather(DefaultAllGather):
        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            ctx.meter.add(1, ring_bytes(output_tensor, ctx.world))
            phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
            return timed(lambda: super(CountingAllGather, self).__call__(output_tensor, input_tensor, group, async_op), phase)

    class CountingReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            ctx.meter.add(1, ring_bytes(input_tensor, ctx.world))
            return timed(lambda: super(CountingReduceScatter, self).__call__(output_tensor, input_tensor, group, op, async_op), "backward")

    return CountingAllGather(), CountingReduceScatter()


STRATEGY = FSDP()
