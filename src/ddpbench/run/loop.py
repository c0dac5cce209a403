"""The training loop of one rank (`train_loop`) and what it measures: each step's phases
and communication, recorded a step late (`StepRecorder`, `_record`: a row of
steps_rank{R}.csv), the timed wall, and how many steps the timing minimums need
(`planned_steps` before the run, `more_steps` at the end of the plan).
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any, Callable

import torch

from ddpbench.core import energy, sysinfo
from ddpbench.core.params import CellParams
from ddpbench.run import data as datamod
from ddpbench.core import timers
from ddpbench.run import faults, transforms
from ddpbench.run.precision import LossScaler
from ddpbench.run.rank import agreed_max
from ddpbench.strategies.base import Context, Strategy, gradient_bytes

# Steps the train_*_last10_mean outcomes average over (the 10 in their names: rename them with it);
# train_*_final are the last step's alone.
TAIL_STEPS = 10
MAX_TIMING_CHECKS = 10  # times the ranks agree on more steps for min_timed_s (the pace drifts)


class LoopResult:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.timed_wall_s: float | None = None
        self.last = collections.deque(maxlen=TAIL_STEPS)  # (loss, correct, samples) per step
        self.steps = 0  # steps run (the plan, extended to the timing minimums)
        self.cpu: dict[str, Any] = {}  # CPU time during the timed steps (sysinfo.cpu_snapshot)
        self.energy: dict[str, Any] = {}  # the energy counters at the timed steps' ends (core.energy.snapshot)
        self.timing_started: float | None = None  # wall clock (epoch s) at the first timed step's start
        self.grad_bytes: int | None = None  # gradient bytes this rank held after its first step's sync
        self.scaler: LossScaler | None = None

    def tail(self, k: int = TAIL_STEPS) -> tuple[float, float, int]:
        """Sums over the last k steps (k <= TAIL_STEPS; 1: the last step alone): (loss x samples,
        correct, samples), so that ranks (and steps) combine weighted by their samples."""
        steps = list(self.last)[max(len(self.last) - k, 0):]  # ([-0:] would be every step)
        return (
            sum(float(loss) * n for loss, _, n in steps),
            sum(float(c) for _, c, _ in steps),  # fractional for token data (token accuracy)
            sum(n for _, _, n in steps),
        )


def planned_steps(params: CellParams, steps_per_epoch: int, first_timed: int) -> int:
    """Steps planned before the run: `epochs` of work, extended so that `min_timed_steps`
    steps are timed, capped by `max_steps` (0: no cap). `min_timed_s` may add more later."""
    steps = max(params.epochs * steps_per_epoch, first_timed + params.min_timed_steps)
    return min(steps, params.max_steps) if params.max_steps else steps


def more_steps(params: CellParams, timed_steps: int, timed_s: float, elapsed_s: float, step: int) -> int:
    """Steps to add at the end of the plan so that the timed steps last `min_timed_s`,
    from the pace so far (10 % margin; the loop checks again, up to MAX_TIMING_CHECKS), within `max_steps` and half the cell's timeout
    (the rest is left for evaluation and the summary)."""
    if timed_steps == 0 or timed_s >= params.min_timed_s:
        return 0
    per_step = timed_s / timed_steps
    want = math.ceil(1.1 * (params.min_timed_s - timed_s) / per_step) if per_step > 0 else 0
    budget = int((0.5 * params.timeout_s - elapsed_s) / per_step) if per_step > 0 else 0
    n = min(want, budget)
    if params.max_steps:
        n = min(n, params.max_steps - step)
    return max(n, 0)


class StepRecorder:
    """Turns closed steps into records a step late (`LAG`): the host waits for the device
    to finish step n only at the end of step n + 1, so it loads and launches the next
    step while the device computes, as an uninstrumented loop does (a wait at the end of
    every step would add the host's work between steps to each step on CUDA).

    The timed wall (what throughput divides by) is the sum, over timed steps, of the time
    from the previous step's last stamp to this step's last stamp, on the clock the steps
    are stamped with (CUDA events: the device's timeline); after a pause (`restart`) a
    step counts from its own first stamp. Losses stay tensors until `settle(0)`, where
    they are read in one transfer (reading one per step would wait for the device)."""

    LAG = 1

    def __init__(self, clock: timers.Clock, rank: int):
        self.clock, self.rank = clock, rank
        self.records: list[dict[str, Any]] = []
        self.timed_wall_s = 0.0
        self._pending: collections.deque = collections.deque()
        self._losses: list[tuple[dict[str, Any], torch.Tensor]] = []
        self._prev_last: Any = None

    def push(self, marks: timers.StepMarks, comm: timers.CommMeter, step, epoch, timed, loss, samples) -> None:
        self._pending.append((marks, comm, step, epoch, timed, loss, samples))
        self.settle(self.LAG)

    def restart(self) -> None:
        """The next step follows a pause that is not part of the timed wall."""
        self._prev_last = None

    def settle(self, keep: int = 0) -> None:
        while len(self._pending) > keep:
            marks, comm, step, epoch, timed, loss, samples = self._pending.popleft()
            marks.resolve(self.clock)
            comm.resolve(self.clock)
            if timed:
                since = marks.first if self._prev_last is None else self._prev_last
                self.timed_wall_s += self.clock.elapsed(since, marks.last)
            self._prev_last = marks.last
            record = _record(step, epoch, self.rank, timed, marks, comm, 0.0, samples)
            self.records.append(record)
            self._losses.append((record, loss))
        if keep == 0 and self._losses:
            for (record, _), value in zip(self._losses, _floats([loss for _, loss in self._losses])):
                record["loss"] = value
            self._losses = []


def _floats(values: list[Any]) -> list[float]:
    """Scalars (numbers or one-element tensors) as floats, in one transfer per device."""
    out: list[float | None] = [None] * len(values)
    by_device: dict[Any, list[int]] = {}
    for i, v in enumerate(values):
        if torch.is_tensor(v):
            by_device.setdefault(v.device, []).append(i)
        else:
            out[i] = float(v)
    for idx in by_device.values():
        for i, v in zip(idx, torch.stack([values[i].detach().reshape(()).double() for i in idx]).tolist()):
            out[i] = v
    return out  # type: ignore[return-value]


def train_loop(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    strategy: Strategy,
    ctx: Context,
    loader: torch.utils.data.DataLoader,
    sampler: datamod.ShardedBatchSampler,
    total_steps: int,
    global_batch: int,
    first_step: int = 0,
    first_timed: int | None = None,
    on_step: Callable[[], None] | None = None,
) -> LoopResult:
    """Steps first_step .. total_steps-1 (epochs follow from the sampler's length); when
    instrumented, steps from `first_timed` on are timed (records resolved a step late,
    `StepRecorder`), and at the end of the plan the ranks agree (one collective, outside
    the timed wall) on how many more steps the timing minimum `min_timed_s` needs (again
    at the end of those, a few times at most).

    With ctx.instrument False this is the bare loop: no device synchronisation, no
    timers, no records (benchmarks/instrumentation_overhead.py compares the two).
    `on_step()` is called at the end of every step (the profiler's step, ddpbench.run.profiling).
    """
    result = LoopResult()
    result.scaler = LossScaler(ctx.params.precision == "fp16")
    held = strategy.held_module(model)
    heartbeat = ctx.heartbeat
    timer = timers.StepTimer(ctx.clock, ctx.instrument, on_lap=heartbeat.lap if heartbeat else None)
    recorder = StepRecorder(ctx.clock, ctx.rank)
    meter, device, instrument = ctx.meter, ctx.device, ctx.instrument
    move = transforms.batch_mover(device, ctx.params, non_blocking=True)
    first_timed = 1 + ctx.params.warmup_steps if first_timed is None else first_timed
    fault = faults.injection(ctx.rank, ctx.params)
    step_start = time.perf_counter()  # a slow rank's step, its own sleep left out, from here
    timing, checks = False, 0 if instrument else MAX_TIMING_CHECKS
    loop_start = time.perf_counter()
    model.train()
    step, epoch, batches = first_step, None, None
    while True:
        if step >= total_steps:
            if checks >= MAX_TIMING_CHECKS or not timing:
                break
            total_steps += _steps_to_add(ctx, recorder, loop_start, step, first_timed)
            checks += 1
            if step >= total_steps:
                break
            recorder.restart()
        if step // len(sampler) != epoch:  # a new epoch: the sampler reshuffles
            epoch = step // len(sampler)
            sampler.set_epoch(epoch)
            batches = iter(loader)
        if heartbeat is not None:
            heartbeat.start_step(step)
        if fault and fault[0] != "slow" and fault[1] == step:
            faults.inject(fault[0], ctx.rank, step)
        timed = instrument and step >= first_timed
        ctx.timed = timed
        if timed and not timing:
            timing = True
            _start_timing(ctx, result)
        timer.begin()
        x, y = next(batches)
        x, y = move(x, y)
        timer.lap("data")
        if fault and fault[0] == "slow":  # charged to forward: a slower rank
            time.sleep(faults.slow_seconds(fault[1], time.perf_counter() - step_start))
            step_start = time.perf_counter()
        loss, correct, samples = _optimizer_step(model, optimizer, strategy, ctx, x, y, global_batch, timer, held, result)
        result.last.append((loss, correct, samples))
        if instrument:
            recorder.push(timer.close(), meter.take(), step, epoch, timed, loss, samples)
        if on_step is not None:
            on_step()
        step += 1
    return _finish(ctx, result, recorder, step, timing)


def _steps_to_add(ctx: Context, recorder: StepRecorder, loop_start: float, step: int, first_timed: int) -> int:
    """End of the plan: enough timed seconds? The ranks agree on the steps still needed (a pause,
    one collective: not in the timed wall)."""
    recorder.settle(0)
    timed_s, elapsed = agreed_max([recorder.timed_wall_s, time.perf_counter() - loop_start], ctx.device)
    return more_steps(ctx.params, step - first_timed, timed_s, elapsed, step)


def _start_timing(ctx: Context, result: LoopResult) -> None:
    """The first timed step begins: compiled code may no longer recompile, and the timed CPU use
    (the other processes' share, sysinfo.other_cpu) is counted from here."""
    transforms.timed_steps(ctx.params)  # compiled: no recompile from here on
    result.timing_started = time.time()
    result.cpu["start"] = sysinfo.cpu_snapshot()
    result.energy["start"] = energy.snapshot(gpu_identity(ctx.device))


def gpu_identity(device: torch.device) -> tuple[str | None, int] | None:
    """(UUID, index) of a rank's GPU, for its energy counter (core.energy); None off CUDA."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return (str(uuid) if uuid is not None else None), index


def _optimizer_step(model, optimizer, strategy, ctx, x, y, global_batch, timer, held, result) -> tuple[Any, Any, int]:
    """One step's forward, backward, gradient synchronisation, optimizer step (skipped when fp16's
    scaler found an overflow) and the strategy's communication after it, each lap timed in its
    phase: (loss, correct, samples counted)."""
    scaler = result.scaler
    loss, correct = accumulate(model, strategy, ctx, x, y, global_batch, scaler.scale, timer)
    samples = strategy.counted_samples(len(y), ctx)
    strategy.sync_gradients(model, ctx)
    timer.lap("comm")
    if result.grad_bytes is None:
        result.grad_bytes = gradient_bytes(held)
    if scaler.unscale(held, strategy.sharded_gradients, ctx.meter):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    timer.lap("optimizer")
    strategy.after_step(model, optimizer, ctx)
    timer.lap("comm")
    return loss, correct, samples


def _finish(ctx: Context, result: LoopResult, recorder: StepRecorder, step: int, timing: bool) -> LoopResult:
    """The loop's result once its last step is resolved; a timed run's CPU use is read and the
    compiled code let recompile again."""
    recorder.settle(0)
    result.steps = step
    result.records = recorder.records
    if timing:
        result.timed_wall_s = recorder.timed_wall_s
        result.cpu["end"] = sysinfo.cpu_snapshot()
        result.energy["end"] = energy.snapshot(gpu_identity(ctx.device))
        transforms.untimed(ctx.params)
    return result


def accumulate(model, strategy, ctx, x, y, global_batch, loss_scale, timer) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step's forward and backward: this rank's share of the global batch split
    into `grad_accum` micro-batches, each loss scaled so that the summed gradients (averaged
    over ranks) are the gradient of the global batch's mean loss; gradients are synchronised
    on the last micro-batch only (strategy.accumulating). Returns (mean loss, correct)."""
    k = ctx.params.grad_accum
    if k == 1:
        return strategy.forward_backward(model, x, y, ctx.world * len(y) / global_batch * loss_scale, timer, ctx)
    if len(y) < k:  # the plan refuses such a cell (params.check_cell); ranks must agree on k
        raise ValueError(f"grad_accum {k} needs at least {k} samples per rank and step; rank {ctx.rank} got {len(y)}")
    parts = list(zip(x.tensor_split(k), y.tensor_split(k)))
    loss_sum, correct = 0.0, 0
    for i, (xm, ym) in enumerate(parts):
        with strategy.accumulating(model, ctx, last=i == len(parts) - 1):
            scale = ctx.world * len(ym) / global_batch * loss_scale
            loss, c = strategy.forward_backward(model, xm, ym, scale, timer, ctx)
        loss_sum = loss_sum + loss.float() * len(ym)
        correct = correct + c
    return loss_sum / len(y), correct


def _record(step, epoch, rank, timed, timer, meter, loss, samples) -> dict[str, Any]:
    """One step's row of steps_rank{R}.csv from its resolved stamps (`timer`: a StepTimer
    after end() or StepMarks) and its communication (`meter`)."""
    ph = dict(timer.phases)
    # Communication timed inside another phase (DDP's buckets in backward, ZeRO's
    # broadcast in the optimizer step) moves its exposed part out of that phase, so a
    # rank's phases still add up to its step.
    comm, exposed = ph["comm"], ph["comm"]
    for phase, (comm_s, exposed_s) in meter.hidden.items():
        ph[phase] -= exposed_s
        comm += comm_s
        exposed += exposed_s
    other = 0.0
    if meter.calls == 0 and not meter.hidden:
        # A step that sent nothing has no communication: the empty hooks' microseconds
        # are loop bookkeeping (other), not communication.
        other, comm, exposed = ph["comm"], 0.0, 0.0
    return {
        "step": step,
        "epoch": epoch,
        "rank": rank,
        "timed": int(timed),
        "data_s": ph["data"],
        "forward_s": ph["forward"],
        "backward_s": ph["backward"],
        "comm_s": comm,
        "exposed_comm_s": exposed,
        "optimizer_s": ph["optimizer"],
        "other_s": other,
        "total_s": timer.total,
        "loss": loss,
        "samples": samples,
        "comm_calls": meter.calls,
        "comm_bytes": meter.bytes,
    }
