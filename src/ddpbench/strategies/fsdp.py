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
replaced (its public set_custom_all_gather / set_custom_reduce_scatter) by the same
collectives (torch.distributed's public all_gather_into_tensor / reduce_scatter_tensor)
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
import functools

import torch
import torch.distributed as dist
from torch import nn

from ddpbench.core import run_record
from ddpbench.strategies.base import Context, Strategy, blocks, timed_blocking

SETTINGS = ()  # the strategy-specific cell parameters it reads

LOW_PRECISION = {"bf16": torch.bfloat16, "fp16": torch.float16}


def ring_bytes(t: torch.Tensor, world: int) -> int:
    """Bytes a rank sends for an all-gather of output `t` or a reduce-scatter of input `t`."""
    return int(round(t.numel() * t.element_size() * (world - 1) / world))


class FSDP(Strategy):
    name = "fsdp"
    comm_volume = "sharded_zero3"
    schedule = "prefetch"
    sharding = "zero3"  # parameters, gradients and optimizer state
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
        if dist.get_backend() == "gloo":
            # FSDP reduce-scatters fp32 gradients with ReduceOp.AVG, which torch 2.8's gloo does not
            # average (its fsdp ended 0.90 away from single; 2.11's and 2.15's do): a sum, then a division.
            for unit in [*units, model]:
                unit.set_force_sum_reduction_for_comms(True)
        ctx.state["units"] = len(units)
        if ctx.instrument:
            ctx.state["comm_counted"] = count_collectives(model, units, ctx, mesh.get_group())
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
            full = {k: whole(v) if isinstance(v, DTensor) else v for k, v in model.state_dict().items()}
            plain = ctx_state["skeleton"].to_empty(device=next(iter(full.values())).device)
            plain.load_state_dict(full)
            ctx_state["bare"] = plain
        return plain

    def extra(self, model, ctx):
        return run_record.extra(
            fsdp_units=ctx.state.get("units"),
            fsdp_comm_counted=ctx.state.get("comm_counted"),
            reshard_after_forward=self.reshard_after_forward,
            exposed_comm_measured=ctx.device.type == "cpu",
        )


def whole(t) -> torch.Tensor:
    """The whole of a sharded parameter (a DTensor, FSDP's Shard(0)), on every rank.
    DTensor.full_tensor() all-gathers through functional collectives, which killed both ranks
    by SIGSEGV with gloo on CUDA tensors (torch 2.11, two ranks sharing one GPU); there the
    shards go through the CPU, padded to torch.chunk's equal pieces as FSDP cuts them."""
    group = t.device_mesh.get_group()
    if t.device.type == "cpu" or dist.get_backend(group) != "gloo" or t.dim() == 0:
        return t.full_tensor()
    return gathered_through_cpu(t.to_local(), t.shape, group).to(t.device)


def gathered_through_cpu(local: torch.Tensor, shape: torch.Size, group) -> torch.Tensor:
    """Rank r's piece is torch.chunk(whole, world)[r]: pieces of ceil(n / world) rows, the last
    ones shorter or empty. Each is padded to that size, all-gathered on the CPU and cut back."""
    world = dist.get_world_size(group)
    rows = -(-shape[0] // world)
    padded = torch.zeros((rows, *shape[1:]), dtype=local.dtype)
    padded[: local.shape[0]] = local.detach().cpu()
    out = torch.empty((rows * world, *shape[1:]), dtype=local.dtype)
    ORIGINAL["all_gather_into_tensor"](out, padded, group=group)  # not counted as training's
    return out[: shape[0]]


def skeleton(model: nn.Module) -> nn.Module:
    """A copy of `model`'s structure with its parameters and buffers on the meta device (no
    memory): `bare` fills it with the full parameters after training."""
    memo = {}
    for t in [*model.parameters(), *model.buffers()]:
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
    return copy.deepcopy(model, memo)


def timed(call, ctx: Context, phase: str):
    """`call()`, its time counted as communication of `phase`: blocking on CPU (gloo holds the
    training thread), overlapped on CUDA (FSDP issues it on its own stream, where it is stamped)."""
    if ctx.device.type == "cpu":
        return timed_blocking(call, ctx, phase)()
    a = ctx.clock.stamp()  # on FSDP's communication stream (the current one here)
    result = call()
    b = ctx.clock.stamp()
    ctx.meter.defer(lambda clock, meter: meter.overlapped(clock.elapsed(a, b), 0.0, phase))
    return result


def count_collectives(model: nn.Module, units: list[nn.Module], ctx: Context, group) -> str:
    """Route FSDP's all-gathers and reduce-scatters over `group` (its mesh's) through the
    counting ones below; returns how (summary extra.fsdp_comm_counted). Where FSDPModule has
    set_custom_all_gather / set_custom_reduce_scatter (newer torch: 2.11 and 2.15 here): "custom_comm", set on every
    unit with parameters of its own. Before (torch 2.8): "torch.distributed": FSDP calls
    torch.distributed.all_gather_into_tensor and reduce_scatter_tensor by name there, so this
    rank's process routes those calls on `group` to the counting ones (ROUTED), every other
    call unchanged. Both count the same calls and bytes, and time them alike."""
    from torch.distributed.fsdp import FSDPModule

    all_gather = CountingAllGather(ctx, ORIGINAL["all_gather_into_tensor"])
    reduce_scatter = CountingReduceScatter(ctx, ORIGINAL["reduce_scatter_tensor"])
    if not hasattr(FSDPModule, "set_custom_all_gather"):
        ROUTED[id(group)] = (all_gather, reduce_scatter)
        dist.all_gather_into_tensor, dist.reduce_scatter_tensor = routed_all_gather, routed_reduce_scatter
        return "torch.distributed"
    in_units = {id(p) for unit in units for p in unit.parameters()}
    for unit in [*units, model]:
        if unit is not model or any(id(p) not in in_units for p in model.parameters()):  # parameters of its own
            unit.set_custom_all_gather(all_gather)
            unit.set_custom_reduce_scatter(reduce_scatter)
    return "custom_comm"


#: torch.distributed's own collectives, as imported (before any routing).
ORIGINAL = {"all_gather_into_tensor": dist.all_gather_into_tensor, "reduce_scatter_tensor": dist.reduce_scatter_tensor}
#: id(process group) -> the counting all-gather and reduce-scatter of the FSDP run on it (torch 2.8).
ROUTED: dict[int, tuple["CountingAllGather", "CountingReduceScatter"]] = {}


def routed_all_gather(output_tensor, input_tensor, group=None, async_op=False):
    """torch.distributed.all_gather_into_tensor, counted where `group` is an FSDP run's."""
    if id(group) in ROUTED:
        return ROUTED[id(group)][0](output_tensor, input_tensor, group, async_op)
    return ORIGINAL["all_gather_into_tensor"](output_tensor, input_tensor, group=group, async_op=async_op)


def routed_reduce_scatter(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """torch.distributed.reduce_scatter_tensor, counted where `group` is an FSDP run's."""
    if id(group) in ROUTED:
        return ROUTED[id(group)][1](output, input, group, op, async_op)
    return ORIGINAL["reduce_scatter_tensor"](output, input, op=op, group=group, async_op=async_op)


class CountingComm:
    """FSDP's custom-communication protocol (FSDPModule.set_custom_all_gather /
    set_custom_reduce_scatter): `allocate` the buffer, then the call, which runs `collective`
    (the torch.distributed function FSDP's default runs), counted and timed in `ctx`."""

    def __init__(self, ctx: Context, collective):
        self.ctx, self.collective = ctx, collective

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)


class CountingAllGather(CountingComm):
    """FSDP's all-gather (torch.distributed.all_gather_into_tensor): calls, ring bytes, time."""

    def __call__(self, output_tensor, input_tensor, group=None, async_op=False):
        self.ctx.meter.add(1, ring_bytes(output_tensor, self.ctx.world))
        call = functools.partial(self.collective, output_tensor, input_tensor, group=group, async_op=async_op)
        return timed(call, self.ctx, self.ctx.phase)


class CountingReduceScatter(CountingComm):
    """FSDP's reduce-scatter of the gradients (torch.distributed.reduce_scatter_tensor): calls, ring bytes, time."""

    def __call__(self, output_tensor, input_tensor, group=None, op=dist.ReduceOp.SUM, async_op=False):
        self.ctx.meter.add(1, ring_bytes(input_tensor, self.ctx.world))
        call = functools.partial(self.collective, output_tensor, input_tensor, op=op, group=group, async_op=async_op)
        return timed(call, self.ctx, "backward")


STRATEGY = FSDP()
