"""The Strategy API: how one gradient-synchronisation scheme plugs into the training loop.

The loop in `ddpbench.run.loop` is the same for every strategy; a strategy only fills hooks:

    model = strategy.wrap(model, ctx)                 # once, before training
    opt = strategy.make_optimizer(model, ctx)         # once
    each step:  data -> for each of grad_accum micro-batches:
                          with strategy.accumulating(model, ctx, last):   [sync only on the last]
                              strategy.forward_backward(...)            [forward, backward]
                     -> strategy.sync_gradients(model, ctx)    [comm]
                     -> opt.step()                             [optimizer]
                     -> strategy.after_step(model, opt, ctx)   [comm]
    strategy.bare(model)                              # the plain nn.Module (results, evaluation)

Blocking communication inside `sync_gradients`/`after_step` is timed by the loop as
communication, all of it exposed. A strategy that communicates *during* backward (DDP)
reports that time with `ctx.meter.overlapped(comm_s, exposed_s)`; the loop then moves
the exposed part out of the backward phase. Every strategy counts what it sends with
`ctx.meter.add(calls, nbytes)`.

Strategies are stateless singletons (`STRATEGY` in each module): per-run state lives in
`ctx.state`, so one process can run several cells (the integration tests do).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:
    from ddpbench.core.timers import Clock, CommMeter, StepTimer
    from ddpbench.core.params import CellParams


@dataclass
class Context:
    """What a strategy may use during one run."""

    params: "CellParams"
    rank: int
    world: int
    device: torch.device
    meter: "CommMeter"
    clock: "Clock"
    instrument: bool = True  # False: the bare loop (benchmarks/instrumentation_overhead.py)
    state: dict[str, Any] = field(default_factory=dict)
    input_shape: tuple[int, ...] = ()  # one sample's shape (C, H, W)
    heartbeat: Any = None  # ddpbench.run.diagnose.Heartbeat: this rank's progress (None: not recorded)
    #: The step's phase while forward_backward runs: "backward" during the backward pass, else
    #: "forward" (a collective issued from a hook is charged to it).
    phase: str = "forward"
    #: Whether the current step is timed (the loop sets it): a strategy's per-step records that
    #: summarise the timed steps (DDP's bucket readiness) keep only those.
    timed: bool = False
    #: The training loss of (logits, targets): `task_loss`, or its compiled twin where the cell
    #: compiles its model (ddpbench.run.transforms.loss).
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = field(default=lambda out, y: task_loss(out, y))

    def autocast(self) -> ContextManager:
        """The cell's precision for forward and loss: autocast to bf16/fp16, else nothing."""
        dtype = AUTOCAST_DTYPES.get(self.params.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)


# precision -> the dtype autocast computes in (fp32 and tf32: no autocast).
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def blocks(model: nn.Module) -> list[nn.Module]:
    """A model's blocks: the units FSDP shards one by one, and those activation checkpointing
    recomputes and torch.compile compiles (run.transforms). The model's own `fsdp_units()` where
    it has one (a GPT's blocks: its tied embedding is used again by the head, so it must stay in
    the root's unit), else its children that hold parameters, with containers (Sequential,
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


class Strategy:
    """Base class: no communication. Subclasses override the hooks they need."""

    name: str = "base"
    #: Final parameters equal `single`'s on the same global batches (tests check this).
    exact: bool = True
    min_world: int = 2
    max_world: int | None = None
    #: How the busiest rank's bytes per step grow with p (ddpbench.strategies.COMM_VOLUME): the cost
    #: model extrapolates measured bytes with it.
    comm_volume: str = "allreduce"
    #: How each rank keeps the model between steps (SHARDINGS): replicated, ZeRO-1/2/3 or pipeline
    #: stages. The plan's held bytes, the memory analysis and the sharding study read it.
    sharding: str = "replicated"
    #: When its communication runs against the computation (ddpbench.strategies.SCHEDULES), what the
    #: step model (ddpbench.stepmodel) builds a step's critical path from: "blocking" after backward,
    #: "overlap" (bucket_mb buckets handed to communication as backward produces them, on one stream:
    #: a bucket as large as the gradient leaves nothing to overlap, the plan warns), "root" (through
    #: rank 0), "prefetch" (FSDP's all-gathers ahead of the unit that needs them; on gloo they block),
    #: "periodic" (every sync_period steps), "stages" (a pipeline), "none".
    schedule: str = "blocking"
    #: Sends with send/recv (gloo moves only collectives' CUDA tensors, not these).
    point_to_point: bool = False
    #: Each rank holds only its shard of the gradients after sync (a check over them, such
    #: as the loss scale's overflow test, must be agreed between ranks).
    sharded_gradients: bool = False
    #: Its wrap imports torch._dynamo (DistributedDataParallel's constructor, fully_shard,
    #: torch.distributed.pipelining): the launcher's zygote imports it once before forking
    #: the ranks (ddpbench.run.torchrun), which the others would only pay for.
    imports_dynamo: bool = False
    #: It trains under autocast (precision bf16 or fp16); False: fp32 only, the plan refuses the others
    #: (core.params.check_training_setup).
    mixed_precision: bool = True

    def unsupported(self, world: int) -> str | None:
        """Why this strategy cannot run at `world` ranks (None: it can)."""
        from ddpbench.strategies import world_size_refusal

        return world_size_refusal(self.name, world, self.min_world, self.max_world)

    def steady_step(self, ctx: Context) -> int:
        """The first step of the steady state (e.g. when compression starts): the first
        step and the warm-up steps are counted from here, so timing sees one regime."""
        return 0

    def wrap(self, model: nn.Module, ctx: Context) -> nn.Module:
        return model

    def bare(self, model: nn.Module) -> nn.Module:
        return model

    def make_optimizer(self, model: nn.Module, ctx: Context) -> torch.optim.Optimizer:
        return make_optimizer(model.parameters(), ctx.params)

    def accumulating(self, model: nn.Module, ctx: Context, last: bool) -> ContextManager:
        """The context of one micro-batch's forward and backward: gradients are synchronised
        only on the `last` micro-batch of an optimizer step (DDP's no_sync, FSDP's
        set_requires_gradient_sync). The explicit strategies sync after backward anyway."""
        return contextlib.nullcontext()

    def forward_backward(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, scale: float, timer: "StepTimer", ctx: Context
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward and backward; returns (mean loss, correct predictions), detached.

        `scale` = world * local samples / global samples, so that averaging the ranks'
        gradients gives the gradient of the global batch's mean loss even when the
        global batch does not split evenly or is accumulated over micro-batches (times
        the loss scale under fp16).
        """
        with ctx.autocast():
            out = model(x)
            loss = ctx.loss(out, y)
        correct = task_correct(out.detach(), y)
        timer.lap("forward")
        ctx.phase = "backward"
        try:
            (loss * scale if scale != 1.0 else loss).backward()
        finally:
            ctx.phase = "forward"
        timer.lap("backward")
        return loss.detach(), correct

    def sync_gradients(self, model: nn.Module, ctx: Context) -> None:
        """Make every rank's gradients the average over ranks (called after backward)."""

    def after_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, ctx: Context) -> None:
        """Communication after the optimizer step (e.g. parameter averaging)."""

    def extra(self, model: nn.Module, ctx: Context) -> dict[str, Any]:
        """Strategy-specific scalars for summary.json's "extra"."""
        return {}

    def held_module(self, model: nn.Module) -> nn.Module:
        """The module whose parameters and gradients this rank holds for training."""
        return model

    def optimizer_state_bytes(self, optimizer: torch.optim.Optimizer) -> int:
        """Bytes of optimizer state (e.g. momentum buffers) this rank holds."""
        return state_bytes(optimizer)

    def data_shard(self, ctx: Context) -> tuple[int, int]:
        """(shard, shards) of each global batch this rank reads: its own slice by default;
        (0, 1) for a rank that needs the whole batch (pipeline stages)."""
        return ctx.rank, ctx.world

    def counted_samples(self, samples: int, ctx: Context) -> int:
        """Samples this rank's step counts toward throughput and the final train loss
        (a pipeline counts the batch once, on the stage that computes the loss)."""
        return samples


def timed_blocking(call: Callable[[], Any], ctx: Context, phase: str) -> Callable[[], Any]:
    """`call` wrapped so that its time counts as blocking communication inside `phase`
    (stamped around it; read once the device has reached the step's end)."""

    def timed():
        a = ctx.clock.stamp()
        result = call()
        b = ctx.clock.stamp()
        ctx.meter.defer(lambda clock, meter: meter.blocking(clock.elapsed(a, b), phase))
        return result

    return timed


# -- helpers shared by the explicit (blocking, after-backward) strategies ---------------------


def gradients(model: nn.Module) -> list[torch.Tensor]:
    """Every trainable parameter's gradient, in a fixed order; missing ones become zeros so
    all ranks communicate the same layout."""
    grads = []
    for p in model.parameters():
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    return grads


def buckets(tensors: list[torch.Tensor], bucket_mb: float) -> Iterator[list[torch.Tensor]]:
    """Groups of `bucket_mb` MiB as DDP forms them (its bucket_cap_mb), so equal settings
    are like for like: in reverse order (the order backward produces gradients), a
    bucket closes once it holds at least the cap (one tensor may overshoot it)."""
    limit = int(bucket_mb * 2**20)
    group: list[torch.Tensor] = []
    size = 0
    for t in reversed(tensors):
        group.append(t)
        size += t.numel() * t.element_size()
        if size >= limit:
            yield group
            group, size = [], 0
    if group:
        yield group


class BucketedSum(Strategy):
    """Flatten gradients into buckets, sum each over ranks with `reduce_sum_`, divide.

    Subclasses choose the grouping (`groups`) and the way of summing (`reduce_sum_`).
    """

    def groups(self, grads: list[torch.Tensor], ctx: Context) -> Iterator[list[torch.Tensor]]:
        return buckets(grads, ctx.params.bucket_mb)

    def reduce_sum_(self, flat: torch.Tensor, ctx: Context) -> None:
        raise NotImplementedError

    def sync_gradients(self, model: nn.Module, ctx: Context) -> None:
        for group in self.groups(gradients(model), ctx):
            # A lone tensor is reduced in place: no copy in, no copy out.
            flat = group[0] if len(group) == 1 else torch.cat([g.reshape(-1) for g in group])
            self.reduce_sum_(flat, ctx)
            flat.div_(ctx.world)
            if len(group) > 1:
                offset = 0
                for g in group:
                    g.copy_(flat[offset : offset + g.numel()].view_as(g))
                    offset += g.numel()


class SGD:
    """torch.optim.SGD's step, bit for bit, without torch.optim.Optimizer around it.

    torch.optim.Optimizer's methods (add_param_group in the constructor, step, zero_grad)
    import torch._dynamo on first use (torch._disable_dynamo, graph breaks for
    torch.compile): about 1.2 s per rank on a quiet 2-core machine, more under load, and a
    slower interpreter exit, in every cell, while no cell compiles anything. This class
    keeps the state as torch.optim.SGD does (param_groups, state[p]["momentum_buffer"]) and
    updates it through torch's documented functional API, torch.optim.sgd.sgd, with the
    arguments torch.optim.SGD.step passes (its foreach/fused choice included), under
    no_grad as that API asks; tests/unit/test_strategies.py checks it against
    torch.optim.SGD step by step. Only what the harness uses: no closures, hooks or
    state_dict. (`zero` keeps torch's optimizer: ZeroRedundancyOptimizer is one.)
    """

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        from torch.optim.sgd import sgd

        self._sgd = sgd
        self.defaults = {
            "lr": lr, "momentum": momentum, "dampening": 0.0, "weight_decay": weight_decay, "nesterov": False,
            "maximize": False, "foreach": None, "differentiable": False, "fused": None,
        }  # fmt: skip
        params = list(params)
        if not params:
            raise ValueError("SGD got an empty parameter list")
        self.param_groups = [{"params": params, **self.defaults}]
        self.state: dict[torch.Tensor, dict[str, Any]] = {}

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            momentum = group["momentum"] != 0
            buffers = [self.state.get(p, {}).get("momentum_buffer") for p in params] if momentum else []
            self._sgd(
                params, grads, buffers, has_sparse_grad=any(g.is_sparse for g in grads), foreach=group["foreach"],
                fused=group["fused"], weight_decay=group["weight_decay"], momentum=group["momentum"],
                lr=group["lr"], dampening=group["dampening"], nesterov=group["nesterov"], maximize=group["maximize"],
            )  # fmt: skip
            if momentum:
                for p, buf in zip(params, buffers, strict=True):
                    self.state.setdefault(p, {})["momentum_buffer"] = buf

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()


def optimizer_class(params: "CellParams", parameters: list[torch.Tensor]) -> tuple[type, dict[str, Any]]:
    """The cell's optimizer as (torch class, its arguments) for `parameters`: AdamW fused where
    torch can (fused_adamw_supported), else foreach. Also for ZeroRedundancyOptimizer."""
    if params.optimizer == "adamw":
        fast = {"fused": True} if fused_adamw_supported(parameters) else {"foreach": True}
        return torch.optim.AdamW, {"lr": params.lr, "weight_decay": params.weight_decay, **fast}
    return torch.optim.SGD, {"lr": params.lr, "momentum": params.momentum, "weight_decay": params.weight_decay}



def task_loss(out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of a classifier's logits (N, K) against labels (N,), or of a language
    model's (N, T, V) against next tokens (N, T). A sample's loss is its mean over positions,
    so "sum" sums samples (what test loss divides by samples)."""
    if out.dim() == 3:
        # Positions as rows (N*T, V), not (N, V, T): the (N, C, d) form runs CUDA's strided
        # "spatial" softmax, which took 38 % of a GPT-2-small step on an H200; the rows' is contiguous.
        n, t, v = out.shape
        per_position = nn.functional.cross_entropy(out.reshape(n * t, v), y.reshape(n * t), reduction="none")
        per_sample = per_position.view(n, t).mean(1)
        return per_sample.sum() if reduction == "sum" else per_sample.mean()
    return nn.functional.cross_entropy(out, y, reduction=reduction)


def task_correct(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Correct predictions in samples: for token data a sample counts the fraction of its
    positions whose most likely next token is the true one (so accuracy = token accuracy)."""
    hits = out.argmax(-1) == y
    return hits.float().mean(1).sum() if hits.dim() == 2 else hits.sum()

def make_optimizer(parameters, params: "CellParams"):
    """The cell's optimizer over `parameters`: SGD (this module's, torch's step without the
    dynamo import) or torch's AdamW, fused where torch has the kernel for the device."""
    if params.optimizer == "adamw":
        parameters = list(parameters)
        cls, kwargs = optimizer_class(params, parameters)
        return cls(parameters, **kwargs)
    return SGD(parameters, lr=params.lr, momentum=params.momentum, weight_decay=params.weight_decay)


def fused_adamw_supported(parameters: list[torch.Tensor]) -> bool:
    """Whether torch's fused AdamW takes these parameters (CUDA; CPU since torch 2.4; plain
    floating-point tensors or DTensors of them): the field's fastest step where it exists."""
    try:
        torch.optim.AdamW([torch.zeros(1, device=p.device, dtype=p.dtype) for p in parameters[:1]], fused=True)
    except (RuntimeError, ValueError, TypeError):
        return False
    return bool(parameters) and all(p.dtype.is_floating_point for p in parameters)


def optimizer_implementation(optimizer: Any) -> str:
    """How the optimizer steps its tensors (summary extra.optimizer_impl): fused (one kernel
    for all), foreach (multi-tensor ops) or for-loop (one tensor at a time), as torch chose
    it where the group leaves it open (foreach None: foreach on CUDA, for-loop on CPU)."""
    group = getattr(optimizer, "param_groups", [{}])[0]
    if group.get("fused"):
        return "fused"
    foreach = group.get("foreach")
    if foreach is None:
        params = group.get("params") or []
        foreach = bool(params) and all(p.device.type == "cuda" for p in params)
    return "foreach" if foreach else "for-loop"


def allreduce_bytes(nbytes: int, world: int) -> int:
    """Bytes one rank sends in an all-reduce of `nbytes`, counted as a bandwidth-optimal
    ring does (2(p-1)/p of the message; nccl-tests' bus-bandwidth convention)."""
    return int(round(2 * (world - 1) * nbytes / world))


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def local_nbytes(t: torch.Tensor) -> int:
    """Bytes this rank holds of `t`: its own shard of a sharded tensor (FSDP's DTensor)."""
    to_local = getattr(t, "to_local", None)
    return nbytes(to_local() if to_local is not None else t)


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors in an optimizer's state this rank holds (its shards)."""
    return sum(local_nbytes(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of the parameters this rank holds (its shards)."""
    return sum(local_nbytes(p) for p in model.parameters())


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of the gradients this rank holds now (its shards)."""
    return sum(local_nbytes(p.grad) for p in model.parameters() if p.grad is not None)


__all__ = [
    "Context", "Strategy", "SGD", "BucketedSum", "timed_blocking", "gradients", "buckets", "allreduce_bytes", "nbytes",
    "local_nbytes", "state_bytes", "parameter_bytes", "gradient_bytes", "make_optimizer", "optimizer_class", "dist",
]  # fmt: skip
