"""The model as it is trained beyond its layers, the one seam where a model is changed before
training (`apply`, then `wrapped`, in torchtitan's `parallelize` order): whole-model converters
(MODEL_CONVERTERS, torchtitan's ModelConverter: the model converted, and here its batches too),
then activation checkpointing and torch.compile applied to each block (BLOCK_STEPS over
strategies.base.blocks: a GPT's transformer blocks, a ResNet's, an MLP's layers), then the
strategy's wrap.

- `memory_format: channels_last` converts the model's 4-d tensors (convolution weights) to NHWC,
  and every batch to the same layout as it reaches the device (`to_device`, the one place a batch
  moves): the values are the same, the convolution kernels that read them are not.

Each block's forward is replaced on the instance by a method bound to it:
- `activation_checkpointing: full` runs every block's forward under torch.utils.checkpoint
  (non-reentrant): its activations are freed after the forward and recomputed in the backward;
  `selective` does so for every other block (the 1st, 3rd, ...): half the recompute for half
  the memory saved.
- `compile: model` compiles each block's forward (checkpointed or not) with
  torch.compile(fullgraph=True): a graph break fails the first step with dynamo's reason. The loss
  is compiled too (`loss`): eager, a language model's cross-entropy copies the logits to fp32 and
  runs log-softmax and its backward as separate passes over them, 27 % of a compiled GPT-2-small
  step on an H200 (issue 71); compiled, they are fused into a pass or two over the bf16 logits.

Why per block, on the forward: the hooks of the strategies stay outside the compiled graphs, as
PyTorch documents for FSDP2 (compile each block, then fully_shard it: the all-gather before a
block's forward and the reduce-scatter after its backward run between graphs); DDP's gradient
hooks fire as each block's compiled backward hands its gradients over, so no graph needs
splitting at bucket boundaries (dynamo's DDPOptimizer is turned off). The state dict's keys are unchanged, and a bound
method survives a deep copy bound to the copy (the replay's initial model, FSDP's skeleton).

Compilation happens in the first step, which is never timed; from the first timed step on the
compiler's stance is `fail_on_recompile` (`timed_steps`), so a recompile in a timed step fails
the run instead of being measured. Evaluation, the replay of single and the FLOP count run eager
(`eager`); the model FLOPs are counted without the recompute (`without_recompute`), the hardware
FLOPs with it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
import types
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ddpbench.core import run_record
from ddpbench.core.params import CellParams
from ddpbench.strategies.base import blocks, task_loss

BACKEND_ENV = "DDPBENCH_COMPILE_BACKEND"
_recompute = {"on": True}  # off while the model FLOPs are counted (without_recompute)
_graphs = {"at_apply": 0}  # dynamo's graph count when the blocks were compiled


def checkpointed_blocks(params: CellParams, n: int) -> list[int]:
    """Indices of the blocks (of `n`) whose activations are recomputed."""
    if params.activation_checkpointing == "full":
        return list(range(n))
    if params.activation_checkpointing == "selective":
        return list(range(0, n, 2))
    return []


def _checkpoint_step(params: CellParams, index: int, blocks_in_model: int) -> Step | None:
    return _checkpointed if index in checkpointed_blocks(params, blocks_in_model) else None


def _compile_step(params: CellParams, index: int, blocks_in_model: int) -> Step | None:
    if params.compile != "model":
        return None
    return lambda forward: torch.compile(forward, fullgraph=True, backend=compile_backend())


Step = Callable[[Callable], Callable]  # a block's forward -> the forward it runs instead
#: What is done to each block's forward, in this order: checkpointed, then compiled (the graph
#: holds the recompute). Each entry says, for a cell and a block, its Step or None. An axis that
#: changes the model as it is trained (float8 matmuls, another kernel) is one more entry here, a
#: CellParams field and a test; `wrapped` then hands the model to the strategy's wrap.
BLOCK_STEPS: tuple[tuple[str, Callable[[CellParams, int, int], Step | None]], ...] = (
    ("activation_checkpointing", _checkpoint_step),
    ("compile", _compile_step),
)


@dataclasses.dataclass(frozen=True)
class Converter:
    """A whole-model change (torchtitan's ModelConverter): `convert` changes the model in place before
    the block steps; `batch` lays out each batch as the converted model reads it."""

    convert: Callable[[nn.Module], Any]
    batch: Callable[[torch.Tensor], torch.Tensor]


def _channels_last(params: CellParams) -> Converter | None:
    if params.memory_format != "channels_last":
        return None
    nhwc = torch.channels_last
    return Converter(lambda model: model.to(memory_format=nhwc),
                     lambda x: x.contiguous(memory_format=nhwc) if x.dim() == 4 else x)  # fmt: skip


#: Whole-model converters, in this order, before BLOCK_STEPS: each entry says, for a cell, its
#: Converter or None. An axis that changes the whole model (a layout, float8 linears) is one more
#: entry here and a CellParams field.
MODEL_CONVERTERS: tuple[tuple[str, Callable[[CellParams], Converter | None]], ...] = (
    ("memory_format", _channels_last),
)


@functools.lru_cache(maxsize=16)
def converters(params: CellParams) -> tuple[tuple[str, Converter], ...]:
    """The cell's converters (name, Converter), in MODEL_CONVERTERS' order."""
    return tuple((name, c) for name, of in MODEL_CONVERTERS if (c := of(params)) is not None)


def batch_mover(device: torch.device, params: CellParams, non_blocking: bool = False):
    """(x, y) -> the batch on the device as the cell's model reads it (its converters' layout): the
    one place a batch moves (training, evaluation, the FLOP count). The converters are looked up
    once here, not in every training step."""
    layouts = [c.batch for _, c in converters(params)]

    def move(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
        for layout in layouts:
            x = layout(x)
        return x, y

    return move


def to_device(x: torch.Tensor, y: torch.Tensor, device: torch.device, params: CellParams,
              non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One batch moved as `batch_mover` moves them."""
    return batch_mover(device, params, non_blocking)(x, y)


def apply(model: nn.Module, params: CellParams) -> dict[str, Any]:
    """Apply MODEL_CONVERTERS to `model`, then BLOCK_STEPS to its blocks, in place as `params` asks;
    what was done, for the run's record (extra: the converters, the block counts)."""
    applied = converters(params)
    for _, c in applied:
        c.convert(model)
    units = blocks(model)
    done = {name: 0 for name, _ in BLOCK_STEPS}
    for i, block in enumerate(units):
        forward = type(block).forward  # the class's: a block transformed twice is not stacked
        for name, step_of in BLOCK_STEPS:
            step = step_of(params, i, len(units))
            if step is not None:
                forward, done[name] = step(forward), done[name] + 1
        if forward is not type(block).forward:
            block.forward = types.MethodType(forward, block)
    compiled = params.compile == "model"
    if compiled:
        _blocks_hand_ddp_their_gradients()
        _graphs["at_apply"] = _dynamo_graphs() or 0
    return run_record.extra(blocks=len(units), checkpointed_blocks=done["activation_checkpointing"],
                            compiled_blocks=done["compile"], compiled_loss=compiled,
                            compile_backend=compile_backend() if compiled else None,
                            converted=" ".join(name for name, _ in applied))  # fmt: skip


def loss(params: CellParams) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The training loss the cell's steps call (strategies.base.Context.loss): `task_loss`, compiled
    (fullgraph) where the cell compiles its blocks. Like the blocks it compiles in the first,
    untimed step and runs eager under `eager` (evaluation and the replay call task_loss anyway)."""
    if params.compile != "model":
        return task_loss
    return torch.compile(task_loss, fullgraph=True, backend=compile_backend())


@dataclasses.dataclass
class Prepared:
    """The model as it trains (wrapped by its strategy), what `apply` did to its blocks, and, when
    asked, a copy of it transformed but not wrapped (the replay of single starts from it)."""

    model: nn.Module
    record: dict[str, Any]
    unwrapped: nn.Module | None


def wrapped(
    model: nn.Module, record: dict[str, Any], wrap: Callable[[nn.Module], nn.Module], keep_unwrapped: bool
) -> Prepared:
    """The second half of the seam, in torchtitan's order: `model`, its blocks already checkpointed
    and compiled (`apply`, whose `record` this is), handed to the strategy's wrap (DDP,
    fully_shard, a pipeline stage, ...) so that the strategy's hooks stay outside the compiled
    graphs. Between the two halves the cell measures the model as it will train (its batch size
    searched with the recompute's memory, ddpbench.run.cell)."""
    unwrapped = copy.deepcopy(model) if keep_unwrapped else None
    return Prepared(wrap(model), record, unwrapped)


def compile_backend() -> str:
    """torch.compile's backend: inductor (what training uses), or $DDPBENCH_COMPILE_BACKEND (e.g.
    aot_eager: dynamo and AOTAutograd without code generation, which the tests use to check in
    seconds that every strategy composes with compile; recorded in env.env_vars and extra)."""
    return os.environ.get(BACKEND_ENV) or "inductor"


def _blocks_hand_ddp_their_gradients() -> None:
    """Dynamo's DDPOptimizer splits a graph compiled inside DDP's forward at bucket boundaries, so
    that DDP's all-reduces overlap the backward of a whole-model graph. Blocks compiled one by
    one already hand DDP their gradients block by block (its C++ reducer overlaps them as in
    eager), so it is turned off; it would also refuse buckets smaller than DDP's first (1 MiB).
    A private setting (torch._dynamo.config, where PyTorch's DDP docs name it), set guarded:
    a torch without it is left as it is."""
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    if config is not None and hasattr(config, "optimize_ddp"):
        config.optimize_ddp = False


def _checkpointed(forward: Callable) -> Callable:
    from torch.utils.checkpoint import checkpoint

    def recomputing(self, *args, **kwargs):
        if not _recompute["on"]:
            return forward(self, *args, **kwargs)
        if torch.compiler.is_compiling():  # the graph's recompute is a pure function: no state to keep
            return checkpoint(forward, self, *args, use_reentrant=False, **kwargs)
        keep = lambda: (contextlib.nullcontext(), running_state_kept(self))  # noqa: E731 (the recompute's context)
        return checkpoint(forward, self, *args, use_reentrant=False, context_fn=keep, **kwargs)

    return recomputing


@contextlib.contextmanager
def running_state_kept(module: nn.Module) -> Iterator[None]:
    """The buffers of `module` as they were before, once the body is over: the recompute of a
    checkpointed block runs its forward a second time, and a module with running state (BatchNorm's
    running mean, variance and batch count; a user's moving average) would update it again, twice
    a step where the eager twin does once. Only a buffer that changed is put back, so a constant
    one (a mask autograd may have saved) is never written. Compared by value: BatchNorm's kernel
    updates its running statistics in place without moving their version counter."""
    saved = [(b, b.clone()) for b in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, before in saved:
                if not torch.equal(buffer, before):
                    buffer.copy_(before)


@contextlib.contextmanager
def without_recompute() -> Iterator[None]:
    """Checkpointed blocks keep their activations for the duration (the model FLOPs' count)."""
    before, _recompute["on"] = _recompute["on"], False
    try:
        yield
    finally:
        _recompute["on"] = before


def eager(params: CellParams):
    """The context in which compiled blocks run eager (evaluation, the replay, the FLOP count)."""
    return torch.compiler.set_stance("force_eager") if params.compile != "none" else contextlib.nullcontext()


def timed_steps(params: CellParams) -> None:
    """From the first timed step on: a recompile fails the run instead of landing in a timed step."""
    if params.compile != "none":
        torch.compiler.set_stance("fail_on_recompile")


def untimed(params: CellParams) -> None:
    """After the loop: the compiler's stance back to the default."""
    if params.compile != "none":
        torch.compiler.set_stance("default")


def compiled_graphs() -> int | None:
    """Graphs dynamo has compiled since `apply` (all before the timed steps), or None where this
    torch does not count them."""
    graphs = _dynamo_graphs()
    return None if graphs is None else graphs - _graphs["at_apply"]


def _dynamo_graphs() -> int | None:
    """Graphs dynamo has compiled in this process: a private counter, read guarded (the record
    says None rather than the run failing on a torch without it)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return None
