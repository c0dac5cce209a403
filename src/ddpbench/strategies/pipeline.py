"""`pipeline`: pipeline parallelism, GPipe schedule (torch.distributed.pipelining).

The model (an `nn.Sequential`: mlp, simple_cnn) is cut into `world_size` consecutive
stages of about equal multiply-accumulates (measured from one sample's layer shapes);
rank r holds stage r. Every rank reads the whole global batch (no data parallelism);
each step splits it into `micro_batches` micro-batches, runs all their forwards through
the stages, then all their backwards (GPipe), and each stage's optimizer steps its own
parameters. With micro-batches of equal size the result is `single`'s up to rounding.

Measured per step and stage: forward and backward compute (time inside the stage's
`forward_one_chunk`/`backward_one_chunk`); the rest of the step is the stage waiting for
or exchanging activations and gradients, reported as exposed communication. The bubble
fraction is that idle share of the step, averaged over timed steps and stages
(extra.bubble_fraction; per stage ..._max), next to GPipe's ideal (p-1)/(m+p-1)
(extra.bubble_fraction_ideal) for p stages of equal cost and free communication.
Bytes: activations sent forward and their gradients sent back, per micro-batch.
At the end the stages' parameters are broadcast into a full model on every rank, for
evaluation and the parameter checks. Other models: failed, with the reason.
"""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from ddpbench.core import run_record
from ddpbench.core.params import SEQUENTIAL_LAYERS
from ddpbench.strategies.base import Strategy, make_optimizer, nbytes

SETTINGS = ("micro_batches",)  # the strategy-specific cell parameters it reads


def ideal_bubble_fraction(stages: int, micro_batches: int) -> float:
    """GPipe's idle share of a step: (p-1)/(m+p-1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def layer_costs(model: nn.Sequential, sample: torch.Tensor) -> list[int]:
    """Multiply-accumulates of each layer for one sample (weights x output positions)."""
    costs, x = [], sample
    with torch.no_grad():
        for layer in model:
            x = layer(x)
            weights = sum(p.numel() for p in layer.parameters() if p.dim() > 1)
            costs.append(weights * (x[0, 0].numel() if x.dim() > 2 else 1))
    return costs


def cut_points(costs: list[int], stages: int) -> list[int]:
    """Start index of each stage: consecutive, non-empty, about equal total cost."""
    n = len(costs)
    if n < stages:
        raise ValueError(f"pipeline: {n} layers cannot make {stages} stages")
    before = [0, *itertools.accumulate(costs)]
    starts = [0]
    for k in range(1, stages):
        target = before[-1] * k / stages
        i = next((i for i in range(n) if before[i] >= target), n)
        starts.append(min(max(i, starts[-1] + 1), n - (stages - k)))
    return starts


class Pipelined(nn.Module):
    """This rank's stage of a full model, with its schedule and measurements."""

    def __init__(self, full: nn.Sequential, ctx, sample: torch.Tensor):
        super().__init__()
        starts = cut_points(layer_costs(full, sample), ctx.world) + [len(full)]
        self.full, self.ctx = full, ctx
        self.owner = [r for r in range(ctx.world) for _ in range(starts[r], starts[r + 1])]
        self.stage_module = full[starts[ctx.rank] : starts[ctx.rank + 1]]
        self.first, self.last = ctx.rank == 0, ctx.rank == ctx.world - 1
        self.stage = PipelineStage(self.stage_module, ctx.rank, ctx.world, ctx.device)
        self.schedule = ScheduleGPipe(self.stage, ctx.params.micro_batches, loss_fn=nn.functional.cross_entropy)
        self.busy = {"forward": 0.0, "backward": 0.0}
        self.steps = 0
        self.idle: list[float] = []  # per timed step: idle / step time
        self._instrument_stage()

    def _instrument_stage(self) -> None:
        stage, clock, meter, busy = self.stage, self.ctx.clock, self.ctx.meter, self.busy
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk
        received: list[int] = []  # bytes of each micro-batch's input: its gradient goes back

        def record_input(module, inputs):
            received.append(sum(nbytes(t) for t in inputs if torch.is_tensor(t)))

        def timed_forward(*args, **kwargs):
            t = clock.now()
            out = forward(*args, **kwargs)
            busy["forward"] += clock.now() - t
            if not self.last:
                meter.add(1, sum(nbytes(o) for o in (out if isinstance(out, tuple) else (out,))))
            return out

        def timed_backward(*args, **kwargs):
            t = clock.now()
            out = backward(*args, **kwargs)
            busy["backward"] += clock.now() - t
            sent = received.pop(0) if received else 0
            if not self.first:
                meter.add(1, sent)
            return out

        self.stage_module.register_forward_pre_hook(record_input)
        stage.forward_one_chunk, stage.backward_one_chunk = timed_forward, timed_backward

    def forward(self, x):  # evaluation: the whole model (after training's final broadcast)
        return self.full(x)


class Pipeline(Strategy):
    name = "pipeline"
    comm_volume = "point_to_point"
    schedule = "stages"
    sharding = "stages"  # each rank holds its stage's layers
    point_to_point = True  # torch.distributed.pipelining sends activations with isend/irecv
    imports_dynamo = True
    exact = False  # the same update as single, but summed per micro-batch: reported, not asserted
    # mixed precision across its stages (activations and their gradients exchanged in bf16/fp16) is not implemented
    mixed_precision = False

    def wrap(self, model, ctx):
        if not isinstance(model, nn.Sequential):
            raise ValueError(
                f"pipeline: {ctx.params.model} is not an nn.Sequential, so it has no layer order to cut "
                f"into stages; supported models: {', '.join(SEQUENTIAL_LAYERS)}"
            )
        return Pipelined(model, ctx, torch.zeros(1, *ctx.input_shape, device=ctx.device))

    def data_shard(self, ctx):
        return 0, 1  # the first stage needs the inputs, the last the targets: all read the batch

    def counted_samples(self, samples, ctx):
        return samples if ctx.rank == ctx.world - 1 else 0

    def make_optimizer(self, model, ctx):
        return make_optimizer(model.stage_module.parameters(), ctx.params)

    def held_module(self, model):
        return model.stage_module  # `full` is assembled for evaluation only, after training

    def forward_backward(self, model, x, y, scale, timer, ctx):
        m = model.ctx.params.micro_batches
        if len(y) % m:
            raise ValueError(f"pipeline: a global batch of {len(y)} does not split into {m} equal micro-batches")
        model.busy.update(forward=0.0, backward=0.0)
        start = model.ctx.clock.now()
        if model.first:
            model.schedule.step(x)
            loss, correct = torch.zeros(()), torch.zeros((), dtype=torch.long)
        elif model.last:
            losses: list[torch.Tensor] = []
            out = model.schedule.step(target=y, losses=losses)
            loss = torch.stack([item.detach() for item in losses]).mean()
            correct = (out.detach().argmax(1) == y).sum()
        else:
            model.schedule.step()
            loss, correct = torch.zeros(()), torch.zeros((), dtype=torch.long)
        step_s = model.ctx.clock.now() - start
        if model.steps > model.ctx.params.warmup_steps and step_s > 0:
            model.idle.append(max(0.0, step_s - sum(model.busy.values())) / step_s)
        model.steps += 1
        timer.lap_split(dict(model.busy), rest="comm")
        return loss, correct

    def bare(self, model):
        """The full model, every stage's parameters broadcast from the rank that trained them."""
        if not model.ctx.state.get("assembled"):
            with torch.no_grad():
                for layer, owner in zip(model.full, model.owner):
                    for t in itertools.chain(layer.parameters(), layer.buffers()):
                        dist.broadcast(t, src=owner)
            model.ctx.state["assembled"] = True
        return model.full

    def extra(self, model, ctx):
        idle = torch.tensor([sum(model.idle) / len(model.idle) if model.idle else float("nan")], dtype=torch.float64)
        per_stage = [torch.zeros_like(idle) for _ in range(ctx.world)]
        dist.all_gather(per_stage, idle)
        fractions = [float(t) for t in per_stage]
        return run_record.extra(
            stages=ctx.world,
            micro_batches=ctx.params.micro_batches,
            bubble_fraction=sum(fractions) / len(fractions),
            bubble_fraction_max=max(fractions),
            bubble_fraction_ideal=ideal_bubble_fraction(ctx.world, ctx.params.micro_batches),
        )


STRATEGY = Pipeline()
