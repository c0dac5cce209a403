"""One cell's training in an initialised process group (`execute`): build the data, model,
strategy and loader, run the loop (ddpbench.run.loop), evaluate, gather every rank's records
to rank 0 and make its summary; with it what a run adds after its timed steps (the profiled
steps, an approximate strategy's replay of `single`) and this rank's steps_rank{R}.csv.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from ddpbench import strategies
from ddpbench.core import energy, run_output, safe_io, sysinfo
from ddpbench.core.run_record import env as env_fields, extra as extra_fields
from ddpbench.core.params import CellParams, is_user_model
from ddpbench.core import timers
from ddpbench.run import autobatch, diagnose, flops, models, precision, profiling, transforms, user_model
from ddpbench.run import data as datamod
from ddpbench.run.loop import TAIL_STEPS, LoopResult, planned_steps, train_loop
from ddpbench.run.rank import Ranks, gather_to_rank0, oversubscribed, rank_spread, seed_streams
from ddpbench.strategies import base
from ddpbench.strategies.base import Context


def wall_clock(perf_s: float) -> float:
    """A time.perf_counter() reading as epoch seconds (env.started_utc: when train.run() began)."""
    return time.time() - (time.perf_counter() - perf_s)


@dataclass
class Cell:
    """What a cell trains with, built alike on every rank: execute's setup, which its later parts read."""

    strategy: Any
    data: datamod.Data
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    ctx: Context
    sampler: datamod.ShardedBatchSampler
    loader: Any
    global_batch: int
    per_rank_batch: int
    first_timed: int
    total_steps: int
    transformed: dict[str, Any]  # blocks, checkpointed_blocks, compiled_blocks
    initial: torch.nn.Module | None  # an approximate strategy's untrained copy (rank 0) for the replay of single
    auto: dict[str, Any] | None  # batch_size "auto": the search's agreed record


@dataclass
class RankResult:
    """What execute keeps of a rank's run once trained and evaluated: the bare model, its flat
    parameters and the ranks' spread of them, the strategy's own fields, the FLOP count, and
    every rank's payload (rank 0 only; the others' list is theirs alone)."""

    bare: torch.nn.Module
    flat: torch.Tensor
    spread: float
    strategy_extra: dict[str, Any]
    counted: Any
    payloads: list[dict[str, Any]]


def execute(
    params: CellParams,
    out: Path,
    ranks: Ranks,
    device: torch.device,
    dump_params: Path | None = None,
    threads: int | None = None,
    t_start: float | None = None,
    heartbeat: diagnose.Heartbeat | None = None,
    marks: dict[str, float] | None = None,
    forked_from_threads: int | None = None,
) -> dict[str, Any] | None:
    """Train one cell in an initialised process group; returns rank 0's summary. Adds this
    run's timeline marks to `marks` (rank 0's; the ranks' start: the last rank's).
    `forked_from_threads`: the threads of the process this rank was forked from
    (train.forked_main), None for a rank started as a new interpreter."""
    marks = {} if marks is None else marks
    t_start = time.perf_counter() if t_start is None else t_start
    load_start = sysinfo.loadavg()
    cell = build_cell(params, ranks, device, heartbeat)
    marks["model_data_ready"] = time.time()
    run = train_loop(
        cell.model, cell.optimizer, cell.strategy, cell.ctx, cell.loader, cell.sampler, cell.total_steps,
        cell.global_batch, first_timed=cell.first_timed,
    )  # fmt: skip
    marks.update(warmup_done=run.timing_started, timed_steps_done=time.time())
    if heartbeat is not None:
        heartbeat.finishing()
    result = finish_rank(cell, run, ranks, device, out, marks)
    if ranks.rank != 0:
        return None
    merge_start_marks(marks, result.payloads)
    if dump_params is not None:
        with safe_io.atomic_write(dump_params, "wb") as handle:
            torch.save({k: v.detach().cpu() for k, v in result.bare.state_dict().items()}, handle)
    stats = summary_metrics(cell, run, result, params, out, t_start)
    extra = summary_extra(cell, run, result, stats, params, ranks, device, threads, forked_from_threads)
    reason = "" if stats["timed_steps"] else "no timed steps: total steps <= 1 + warmup_steps"
    env = summary_env(params, threads, t_start, load_start, result)
    return run_output.make_summary("ok", reason, params.as_dict(), ranks.world, ranks.nodes, env, stats, extra)


def build_cell(
    params: CellParams, ranks: Ranks, device: torch.device, heartbeat: diagnose.Heartbeat | None
) -> Cell:
    """The data, model, strategy, optimizer and loader of a cell, seeded so that every rank starts
    from the same data and weights and then draws its own random stream."""
    strategy = strategies.get(params.strategy)
    precision.configure(params, device)
    torch.manual_seed(params.seed)  # identical data and initial weights on every rank
    data = datamod.load(params)
    model = models.build(params.model, data.shape, data.classes, kind=data.kind, model_path=params.model_path).to(device)
    seed_streams(params.seed + 1 + ranks.rank)  # then a per-rank stream (dropout, augmentation)
    transformed = transforms.apply(model, params)  # checkpointing and compile per block, in place
    # The batch searched on the model as it trains: a checkpointed cell gets the memory it pays for
    batch_size, auto = choose_batch_size(params, data, model, ranks, device)
    global_batch, per_rank_batch = datamod.batch_sizes(batch_size, params.scaling, ranks.world)

    ctx = Context(
        params, ranks.rank, ranks.world, device, timers.CommMeter(), timers.Clock(device.type), input_shape=data.shape,
        heartbeat=heartbeat, loss=transforms.loss(params),
    )  # fmt: skip
    # Then the strategy's wrap. Approximate strategies: rank 0 replays `single` from the same start
    # afterwards (untimed), so it keeps the unwrapped model.
    keep = not strategy.exact and ranks.rank == 0
    prepared = transforms.wrapped(model, transformed, lambda m: strategy.wrap(m, ctx), keep)
    model, initial = prepared.model, prepared.unwrapped
    optimizer = strategy.make_optimizer(model, ctx)
    shard, shards = strategy.data_shard(ctx)
    sampler = datamod.ShardedBatchSampler(len(data.train), global_batch, shard, shards, params.seed)
    loader = datamod.train_loader(data, sampler, params.num_workers, pin_memory=device.type == "cuda")
    first_timed = strategy.steady_step(ctx) + 1 + params.warmup_steps
    total_steps = planned_steps(params, len(sampler), first_timed)
    return Cell(
        strategy, data, model, optimizer, ctx, sampler, loader, global_batch, per_rank_batch, first_timed, total_steps,
        transformed, initial, auto,
    )  # fmt: skip


def choose_batch_size(
    params: CellParams, data: datamod.Data, model: torch.nn.Module, ranks: Ranks, device: torch.device
) -> tuple[Any, dict[str, Any] | None]:
    """The cell's batch_size, searched for when "auto" (the largest per-rank batch that fits the
    memory budget, agreed over ranks): (batch_size, the search's record or None)."""
    if params.batch_size != "auto":
        return params.batch_size, None
    limit = len(data.train) // ranks.world
    with transforms.eager(params):  # trial steps of other batch sizes compile nothing
        found = autobatch.search(
            model, data.shape, device, params.memory_budget_gb, limit, ranks.local_world, tokens=data.kind == "tokens",
            place=transforms.batch_mover(device, params),
        )
    auto = autobatch.agree(found, device)
    return auto["chosen"] * (1 if params.scaling == "weak" else ranks.world), auto


def finish_rank(
    cell: Cell, run: LoopResult, ranks: Ranks, device: torch.device, out: Path, marks: dict[str, float]
) -> RankResult:
    """Everything every rank does after its timed steps, in the order the collectives need: what
    it held and peaked at (read before evaluation allocates), the test set, the parameter spread,
    the profiled steps, the FLOP count, its steps file, and the gather of its payload to rank 0."""
    params, strategy, model = cell.ctx.params, cell.strategy, cell.model
    held = Held(base.parameter_bytes(strategy.held_module(model)), run.grad_bytes or 0,
                strategy.optimizer_state_bytes(cell.optimizer))  # fmt: skip
    peaks = {"peak_rss_mb": timers.peak_rss_mb(), "cuda_max_allocated_mb": timers.cuda_max_allocated_mb(device)}
    bare = strategy.bare(model)
    with transforms.eager(params):
        test = evaluate(bare, cell.data, ranks, device, cell.per_rank_batch, params)
    marks["evaluation_done"] = time.time()
    flat = models.flat_parameters(bare)
    payload = {
        "records": run.records,
        "timed_wall_s": run.timed_wall_s,
        "train": train_sums(run),
        "test": test,
        **peaks,
        "held": held,
        "cpu": run.cpu,
        "energy": run.energy,
        "started": {k: marks.get(k) for k in ("ranks_started", "imports_done")},
    }
    spread = rank_spread(flat)
    strategy_extra = strategy.extra(model, cell.ctx)
    if params.profile_steps:  # after everything above has read the trained model
        payload["profile"] = profile_steps(
            model, cell.optimizer, strategy, cell.ctx, cell.loader, cell.sampler, run.steps, cell.global_batch, bare
        )
    with transforms.eager(params):  # MFU: rank 0, untimed, between barriers
        counted = flops.measure(bare, cell.data, cell.ctx, cell.per_rank_batch, out)
    write_steps(out / f"steps_rank{ranks.rank}.csv", run.records)
    return RankResult(bare, flat, spread, strategy_extra, counted, gather_to_rank0(payload))


class Held(NamedTuple):
    """Bytes one rank holds for training, counted from its own tensors (shards)."""

    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int


def merge_start_marks(marks: dict[str, float], payloads: list[dict[str, Any]]) -> None:
    """init_process_group waits for every rank: the last rank's start is the one that counts."""
    for mark in ("ranks_started", "imports_done"):
        started = [p["started"][mark] for p in payloads if p["started"].get(mark) is not None]
        if started:
            marks[mark] = max(started)


def timed_wall(payloads: list[dict[str, Any]]) -> float:
    """The run's timed wall: the slowest rank's (0.0 where no rank timed a step)."""
    return max(p["timed_wall_s"] or 0.0 for p in payloads)


def summary_metrics(
    cell: Cell, run: LoopResult, result: RankResult, params: CellParams, out: Path, t_start: float
) -> dict[str, Any]:
    """The summary's metrics (run_output.METRIC_KEYS) from every rank's payload, on rank 0; writes
    the run's profile.csv when it profiled steps."""
    payloads = result.payloads
    stats = run_output.step_statistics([p["records"] for p in payloads], timed_wall(payloads), len(cell.data.train))
    if params.profile_steps:
        profiling.write_profile(out / "profile.csv", [row for p in payloads for row in p["profile"]["rows"]])
        stats.update(profiling.summary_fields([p["profile"]["step_s"] for p in payloads], stats.get("step_time_median_s")))
        stats["profile_wall_s"] = max(p["profile"]["wall_s"] for p in payloads)
    t_loss, t_correct, t_n = (sum(p["test"][i] for p in payloads) for i in range(3))
    cuda_mb = [p["cuda_max_allocated_mb"] for p in payloads if p["cuda_max_allocated_mb"] is not None]
    rss = [p["peak_rss_mb"] for p in payloads]
    stats.update(
        global_batch=cell.global_batch,
        per_rank_batch=cell.per_rank_batch,
        wall_time_s=time.perf_counter() - t_start,
        peak_rss_mb=max(rss),
        peak_rss_mb_per_rank=rss,
        cuda_max_allocated_mb=max(cuda_mb) if cuda_mb else None,
        **train_outcomes(payloads),
        test_loss=t_loss / t_n if t_n else None,
        test_acc=t_correct / t_n if t_n else None,
        param_norm=float(result.flat.norm()),
        # Token data: a sample is seq_len tokens, each a prediction (throughput in tokens/s too).
        tokens_per_s=stats["samples_per_s"] * params.seq_len
        if cell.data.kind == "tokens" and stats.get("samples_per_s") else None,
    )  # fmt: skip
    return stats


def summary_extra(
    cell: Cell,
    run: LoopResult,
    result: RankResult,
    stats: dict[str, Any],
    params: CellParams,
    ranks: Ranks,
    device: torch.device,
    threads: int | None,
    forked_from_threads: int | None,
) -> dict[str, Any]:
    """The summary's `extra` (runs.csv's extra_* columns: core.run_record.Extra), on rank 0: how
    the run was measured, what each rank held, the model's health, the strategy's own fields, and
    an approximate strategy's replay of single (run here, untimed, after everything else)."""
    flat, payloads = result.flat, result.payloads
    held_per_rank: list[Held] = [p["held"] for p in payloads]
    state_bytes = [h.optimizer_state_bytes for h in held_per_rank]
    short = stats["timed_steps"] < params.min_timed_steps or (stats.get("timed_wall_s") or 0.0) < params.min_timed_s
    scaler = run.scaler if run.scaler and run.scaler.enabled else None
    health, health_reason = run_output.training_health([r["loss"] for r in sorted(run.records, key=lambda r: r["step"])])
    extra = extra_fields(
        steps_per_epoch=len(cell.sampler),
        first_timed_step=cell.first_timed,
        steps_run=run.steps,
        measurement_short=short,  # max_steps or the timeout stopped it before the minimums
        comm_volume=cell.strategy.comm_volume,
        oversubscribed=device.type == "cpu" and oversubscribed(threads or 1, ranks.local_world),
        forked_from_threads=forked_from_threads,
        model_parameters=flat.numel(),
        param_sample=models.parameter_sample(flat),
        training_health=health,
        training_health_reason=health_reason,
        param_rank_max_abs_diff=result.spread,
        optimizer_impl=base.optimizer_implementation(cell.optimizer),  # fused | foreach | for-loop
        optimizer_state_bytes=max(state_bytes),  # the largest rank's
        optimizer_state_bytes_total=sum(state_bytes),
        # Bytes each rank holds for training, counted from its own tensors (shards): the largest rank's.
        param_bytes=max(h.param_bytes for h in held_per_rank),
        grad_bytes=max(h.grad_bytes for h in held_per_rank),
        held_bytes=max(sum(h) for h in held_per_rank),
        held_bytes_per_rank=[sum(h) for h in held_per_rank],
        **cell.transformed,  # blocks, checkpointed_blocks, compiled_blocks
        **compile_record(params, [p["records"] for p in payloads]),
        loss_scale_final=scaler.scale if scaler else None,
        skipped_steps=scaler.skipped if scaler else 0,
        **flops.fields(result.counted, stats.get("samples_per_s"), ranks.world),
        **energy.fields([p["energy"] for p in payloads], stats.get("samples_per_s"), stats.get("tokens_per_s")),
        **result.strategy_extra,
        **(autobatch.extra(cell.auto) if cell.auto else {}),
    )
    if cell.initial is not None:
        with transforms.eager(params):
            replay = deviation_from_single(cell.initial, result.bare, cell.data, params, device, run.steps, cell.global_batch)
        extra.update(extra_fields(**replay, accuracy_reached=stats["test_acc"]))
    return extra


def summary_env(
    params: CellParams, threads: int | None, t_start: float, load_start: Any, result: RankResult
) -> dict[str, Any]:
    """The summary's `env` (runs.csv's env_* columns: core.run_record.Env), on rank 0: the machine
    and software, the load before and after, the user model's digest, the other processes' CPU and
    the FLOP count's provenance."""
    backend = dist.get_backend() if dist.is_initialized() else None
    env = sysinfo.environment(backend, threads, started=wall_clock(t_start))
    env.update(env_fields(loadavg_start=load_start, loadavg_end=sysinfo.loadavg()))
    if is_user_model(params.model):  # the user's code is outside the package's code fingerprint
        env.update(env_fields(user_model_digest=user_model.source_digest(params.model, params.model_path)))
    cpu = sysinfo.other_cpu([p["cpu"] for p in result.payloads], timed_wall(result.payloads))
    env.update(cpu, **flops.provenance(result.counted))
    return env


def train_sums(run: LoopResult) -> dict[str, tuple[float, float, int]]:
    """A rank's part of train_outcomes: (loss x samples, correct, samples) of its last step and of its
    last TAIL_STEPS steps, keyed by the outcome's name after train_loss_."""
    return {"final": run.tail(1), f"last{TAIL_STEPS}_mean": run.tail()}


def train_outcomes(payloads: list[dict[str, Any]]) -> dict[str, float | None]:
    """train_{loss,acc}_final: the last optimizer step's; train_{loss,acc}_last10_mean: the mean over
    the last TAIL_STEPS steps. Each over every rank, weighted by its samples: the global batch's mean
    loss, as single computes it (a rank's own is its shard's; a pipeline's early stages count none)."""
    out: dict[str, float | None] = {}
    for name in payloads[0]["train"]:
        loss, correct, n = (sum(p["train"][name][i] for p in payloads) for i in range(3))
        out[f"train_loss_{name}"], out[f"train_acc_{name}"] = (loss / n, correct / n) if n else (None, None)
    return out


def compile_record(params: CellParams, records: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """What compiling cost, apart from the timed steps: compile_s, the first step's wall beyond a
    median timed step on the slowest rank (the compile happens in it, and it is never timed), and
    the graphs dynamo compiled in rank 0 (none recompiled in a timed step: the stance forbids it)."""
    if params.compile == "none":
        return extra_fields(compile_s=None, compiled_graphs=None)
    extra_s = []
    for rank in records:
        first = [r["total_s"] for r in rank if r["step"] == 0]
        timed = sorted(r["total_s"] for r in rank if r["timed"])
        if first and timed:
            extra_s.append(max(0.0, first[0] - timed[len(timed) // 2]))
    return extra_fields(compile_s=max(extra_s) if extra_s else None, compiled_graphs=transforms.compiled_graphs())


def deviation_from_single(
    initial: torch.nn.Module,
    trained: torch.nn.Module,
    data: datamod.Data,
    params: CellParams,
    device: torch.device,
    total_steps: int,
    global_batch: int,
) -> dict[str, Any]:
    """Train `initial` as `single` would (one process, the same global batches, the bare
    loop, untimed) and compare: the price in accuracy of an approximate strategy.

    param_deviation_from_single: per tensor max|ours - single| / max|single|, the worst
    tensor (the measure the exact strategies are tested with); ..._l2: ||ours - single||_2 /
    ||single||_2 over all parameters; single_*: the replay's last-step train loss and test accuracy.
    """
    single = strategies.get("single")
    ctx = Context(params, 0, 1, device, timers.CommMeter(), timers.Clock(device.type), instrument=False)
    optimizer = single.make_optimizer(initial, ctx)
    sampler = datamod.ShardedBatchSampler(len(data.train), global_batch, 0, 1, params.seed)
    loader = datamod.train_loader(data, sampler, 0, pin_memory=False)
    run = train_loop(initial, optimizer, single, ctx, loader, sampler, total_steps, global_batch)
    ours = {k: v.detach() for k, v in trained.named_parameters()}
    ref = {k: v.detach() for k, v in initial.named_parameters()}
    worst = max(float((ours[k] - ref[k]).abs().max() / ref[k].abs().max().clamp_min(1e-12)) for k in ref)
    a, b = models.flat_parameters(trained), models.flat_parameters(initial)
    loss, _, n = run.tail(1)  # the last step, as train_loss_final
    _, t_correct, t_n = evaluate(initial, data, Ranks(), device, max(global_batch, 64), params)
    return extra_fields(
        param_deviation_from_single=worst,
        param_deviation_from_single_l2=float((a - b).norm() / b.norm().clamp_min(1e-12)),
        single_train_loss_final=loss / n if n else None,
        single_test_acc=t_correct / t_n if t_n else None,
    )


def profile_steps(model, optimizer, strategy, ctx, loader, sampler, step, global_batch, bare) -> dict[str, Any]:
    """`profile_steps` more steps of this run under torch.profiler (ddpbench.run.profiling), after
    its timed steps: one profiler warm-up step, then the recorded ones; none of them timed or
    in steps_rank{R}.csv. The bare model's parameters and buffers are put back afterwards, so
    what rank 0 saves or compares later is the model the timed run trained. Returns this
    rank's profile.csv rows, its profiled steps' wall seconds and the whole profiling's wall."""
    params = ctx.params
    saved = {k: v.detach().clone() for k, v in bare.state_dict().items()}
    start = time.perf_counter()

    def run_steps(step_done):
        end = step + 1 + params.profile_steps
        return train_loop(model, optimizer, strategy, ctx, loader, sampler, end, global_batch, first_step=step,
                          first_timed=end, on_step=step_done)  # fmt: skip

    averages, result = profiling.profile(ctx.device.type, params.profile_steps, run_steps)
    wall_s = time.perf_counter() - start
    if ctx.heartbeat is not None:
        ctx.heartbeat.finishing()  # a failure from here on is not in a training step
    with torch.no_grad():
        bare.load_state_dict(saved)
    step_s = profiling.step_seconds(result.records)
    mean_s = sum(step_s) / len(step_s) if step_s else 0.0
    rows = profiling.rank_tables(averages, ctx.device.type, params.profile_steps, mean_s, ctx.rank)
    return {"rows": rows, "step_s": step_s, "wall_s": wall_s}


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: datamod.Data, ranks: Ranks, device: torch.device, batch: int,
             params: CellParams):  # fmt: skip
    """This rank's share of the test set: (loss sum, correct, samples)."""
    was_training = model.training
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for x, y in datamod.test_batches(data, ranks.rank, ranks.world, max(batch, 64)):
        x, y = transforms.to_device(x, y, device, params)
        out = model(x)
        loss_sum += float(base.task_loss(out, y, reduction="sum"))
        correct += float(base.task_correct(out, y))
        n += len(y)
    model.train(was_training)
    return loss_sum, correct, n


def write_steps(path: Path, records: list[dict[str, Any]]) -> None:
    """Atomically, like every output (safe_io): a failed write (a full disk) leaves no temporary."""
    with safe_io.atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=run_output.STEP_COLUMNS)
        writer.writeheader()
        writer.writerows(records)
