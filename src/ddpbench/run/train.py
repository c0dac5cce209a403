"""`python -m ddpbench.run.train`: run one grid cell under torchrun and write its measurements.

    torchrun --standalone --nproc-per-node P -m ddpbench.run.train --out DIR [--dump-params FILE] [cell flags]

Every rank writes DIR/steps_rank{R}.csv; rank 0 gathers all ranks' step records (one
collective at the end) and writes DIR/summary.json atomically (schema: contract.md).
Usually started through `python -m ddpbench.run.launch`, which also guarantees a summary
when a rank is killed or the cell runs out of time. Without torchrun it runs world size 1.

Fault injection for tests: DDPBENCH_INJECT="fail:RANK:STEP" raises in that rank at that
step, "hang:RANK:STEP" makes it sleep (a stuck rank), "kill:RANK:STEP" SIGKILLs it,
"oom:RANK:STEP" makes an allocation fail under an address-space limit, "grow:RANK:STEP"
allocates until the kernel's out-of-memory killer stops it (run it in a memory-limited
cgroup), "slow:RANK:MS" makes that rank's forward MS milliseconds longer in every step
(rank imbalance), "fill:RANK:STEP" fills the filesystem of the file DDPBENCH_FILL names
(another program filling the results disk; training goes on until a write fails). Each
rank keeps a heartbeat (ddpbench.run.diagnose) the launcher reads to
name the rank, step and phase of a failure.
"""

from __future__ import annotations

import time

RANK_STARTED = time.time()  # timeline mark ranks_started: this module loaded, torch not yet imported

import argparse
import collections
import contextlib
import copy
import csv
import datetime
import json
import math
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from ddpbench.run import data as datamod
from ddpbench.run import autobatch, diagnose, models, profiling
from ddpbench.core import run_output
from ddpbench.run import timers
from ddpbench.core import safe_io, storage, sysinfo
from ddpbench import strategies
from ddpbench.core.run_output import write_json
from ddpbench.core.params import CellParams
from ddpbench.strategies.base import Context, Strategy
from ddpbench.run.quick_exit import freeze_for_exit

IMPORTS_DONE = time.time()  # timeline mark imports_done: torch and the harness imported

TAIL_STEPS = 10  # final train loss/accuracy: sample-weighted over the last steps
MAX_TIMING_CHECKS = 10  # times the ranks agree on more steps for min_timed_s (the pace drifts)
REASON_CHARS = 2000


@dataclass(frozen=True)
class Ranks:
    """Where this process sits, from the torchrun environment (world size 1 without it)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    launched: bool = False  # under torchrun: a process group can be initialised

    @classmethod
    def from_env(cls) -> "Ranks":
        env = os.environ
        if "RANK" not in env or "MASTER_ADDR" not in env:
            return cls()
        return cls(
            int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"]), True
        )

    @property
    def nodes(self) -> int:
        return max(1, self.world // self.local_world)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpbench.run.train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="run folder (summary.json, steps_rank*.csv)")
    parser.add_argument("--dump-params", type=Path, help="save the final bare model state dict (rank 0) here")
    args, params = CellParams.parse_args(parser, argv)
    return run(params, args.out, args.dump_params)


FORKED_FROM_THREADS: int | None = None  # threads of the process this rank was forked from (None: not forked)


def threads_of(pid: int) -> int | None:
    """How many threads process `pid` has (Linux /proc), or None where that cannot be read."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def forked_main(*argv: str) -> None:
    """A rank forked (ddpbench.run.torchrun's zygote) from a process that had imported this module:
    it starts now with its imports done. A failure exits non-zero, as `main` as a script would.
    Signal handlers it may have inherited (an agent's SIGTERM raising an exception inside
    whatever the rank was doing) are reset to a new interpreter's, so a rank the agent stops
    dies of the signal."""
    global RANK_STARTED, IMPORTS_DONE, FORKED_FROM_THREADS
    RANK_STARTED = IMPORTS_DONE = time.time()
    # One thread: no lock can have been copied held (ddpbench.run.torchrun's zygote); more: a risk
    FORKED_FROM_THREADS = threads_of(os.getppid())
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = main(list(argv))
    if code:
        raise SystemExit(code)


def run(params: CellParams, out: Path, dump_params: Path | None = None) -> int:
    """Set up this rank (threads, device, process group), train, and always leave a
    status behind: skipped/failed summaries from rank 0, error_rank{R}.txt from a failing rank."""
    t_start = time.perf_counter()
    marks = start_marks()
    ranks = Ranks.from_env()
    out.mkdir(parents=True, exist_ok=True)
    heartbeat = diagnose.Heartbeat(out / f"heartbeat_rank{ranks.rank}")  # where this rank is, should it fail
    cuda = params.device == "cuda"
    backend = params.process_group_backend
    threads = configure_threads(params, ranks)

    def finish(status: str, reason: str) -> None:
        if ranks.rank == 0:
            env = sysinfo.environment(backend, threads, started=wall_clock(t_start))
            summary = run_output.make_summary(status, reason, params.as_dict(), ranks.world, ranks.nodes, env)
            write_json(out / "summary.json", run_output.with_timeline(summary, {**marks, "summary_written": time.time()}))

    reason = skip_reason(params, ranks)
    if reason:
        finish("skipped", reason)
        return 0
    device = cuda_device(params, ranks) if cuda else torch.device("cpu")
    try:
        if cuda:
            torch.cuda.set_device(device)
        if ranks.launched:
            dist.init_process_group(
                backend,
                timeout=datetime.timedelta(seconds=params.timeout_s),
                device_id=device if backend == "nccl" else None,
            )
        marks["process_group_ready"] = time.time()
        summary = execute(
            params, out, ranks, device, dump_params=dump_params, threads=threads, t_start=t_start, heartbeat=heartbeat,
            marks=marks,
        )  # fmt: skip
        if summary is not None:
            marks["summary_written"] = time.time()  # the write of the summary itself follows (< 1 ms)
            write_json(out / "summary.json", run_output.with_timeline(summary, marks))
        return 0
    except Exception as err:
        tb = traceback.format_exc()
        if storage.is_storage_error(err):  # kept where a full disk cannot erase it
            heartbeat.storage_failed(err)
            tb += f"{storage.explain(err)}\n"
        print(tb, file=sys.stderr, flush=True)
        try:
            (out / f"error_rank{ranks.rank}.txt").write_text(tb)
            finish("failed", f"rank {ranks.rank}: {tb[-REASON_CHARS:]}")
        except OSError as again:
            if not storage.is_storage_error(again):
                raise
            heartbeat.storage_failed(err if storage.is_storage_error(err) else again)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


_first_run = True


def start_marks() -> dict[str, float]:
    """The timeline so far (run_output.TIMELINE_MARKS): the launcher's marks (from its
    environment variable) and this rank's start. The first run of a process starts at the
    module's load; another run in the same process (tests) starts now."""
    global _first_run
    first, _first_run = _first_run, False
    marks: dict[str, float] = {}
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        launcher = json.loads(os.environ.get(sysinfo.TIMELINE_ENV) or "{}")
        marks.update({k: float(v) for k, v in launcher.items() if k in run_output.TIMELINE_MARKS})
    now = time.time()
    marks.update(ranks_started=RANK_STARTED if first else now, imports_done=IMPORTS_DONE if first else now)
    return marks


def wall_clock(perf_s: float) -> float:
    """A time.perf_counter() reading as epoch seconds (env.started_utc: when run() began)."""
    return time.time() - (time.perf_counter() - perf_s)


def configure_threads(params: CellParams, ranks: Ranks) -> int:
    """threads_per_rank, default cores // processes on this node (at least 1), for torch and OpenMP."""
    threads = sysinfo.rank_threads(params.threads_per_rank, ranks.local_world)
    os.environ.update({name: str(threads) for name in sysinfo.THREAD_POOL_VARS})
    torch.set_num_threads(threads)
    return threads


def cuda_device(params: CellParams, ranks: Ranks) -> torch.device:
    """One GPU per local rank; with gloo, ranks beyond the GPU count share them round-robin."""
    return torch.device("cuda", ranks.local_rank % max(1, torch.cuda.device_count()))


def skip_reason(params: CellParams, ranks: Ranks) -> str | None:
    """Why this cell cannot run here (status skipped), or None."""
    strategy = strategies.get(params.strategy)
    reason = strategy.unsupported(ranks.world)
    if reason:
        return reason
    if params.device == "cuda":
        if not torch.cuda.is_available():
            return f"device cuda requested but CUDA is not available here (torch {torch.__version__})"
        if params.process_group_backend == "gloo":
            if strategy.point_to_point and ranks.world > 1:
                return (
                    f"strategy {strategy.name} sends point to point, which gloo does not do for CUDA "
                    "tensors (backend nccl, one GPU per rank, does)"
                )
            return None  # gloo stages CUDA tensors through the host: ranks may share a GPU
        if torch.cuda.device_count() < ranks.local_world:
            return (
                f"device cuda with {ranks.local_world} processes on this node needs as many GPUs; "
                f"{torch.cuda.device_count()} visible (NCCL refuses two ranks on one GPU; backend gloo lets them share it)"
            )
    return None


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
) -> dict[str, Any] | None:
    """Train one cell in an initialised process group; returns rank 0's summary. Adds this
    run's timeline marks to `marks` (rank 0's; the ranks' start: the last rank's)."""
    marks = {} if marks is None else marks
    t_start = time.perf_counter() if t_start is None else t_start
    load_start = sysinfo.loadavg()
    strategy = strategies.get(params.strategy)
    torch.manual_seed(params.seed)  # identical data and initial weights on every rank
    data = datamod.load(params)
    model = models.build(params.model, data.shape, data.classes).to(device)
    torch.manual_seed(params.seed + 1 + ranks.rank)  # then a per-rank stream (dropout, augmentation)
    batch_size, auto = params.batch_size, None
    if batch_size == "auto":
        limit = len(data.train) // ranks.world
        found = autobatch.search(model, data.shape, device, params.memory_budget_gb, limit, ranks.local_world)
        auto = autobatch.agree(found, device)
        batch_size = auto["chosen"] * (1 if params.scaling == "weak" else ranks.world)
    global_batch, per_rank_batch = datamod.batch_sizes(batch_size, params.scaling, ranks.world)

    ctx = Context(
        params, ranks.rank, ranks.world, device, timers.CommMeter(), timers.Clock(device.type), input_shape=data.shape,
        heartbeat=heartbeat,
    )  # fmt: skip
    # Approximate strategies: rank 0 replays `single` from the same start afterwards (untimed).
    initial = copy.deepcopy(model) if not strategy.exact and ranks.rank == 0 else None
    model = strategy.wrap(model, ctx)
    optimizer = strategy.make_optimizer(model, ctx)
    shard, shards = strategy.data_shard(ctx)
    sampler = datamod.ShardedBatchSampler(len(data.train), global_batch, shard, shards, params.seed)
    loader = datamod.train_loader(data, sampler, params.num_workers, pin_memory=device.type == "cuda")
    first_timed = strategy.steady_step(ctx) + 1 + params.warmup_steps
    total_steps = planned_steps(params, len(sampler), first_timed)
    marks["model_data_ready"] = time.time()

    run = train_loop(model, optimizer, strategy, ctx, loader, sampler, total_steps, global_batch, first_timed=first_timed)
    marks.update(warmup_done=run.timing_started, timed_steps_done=time.time())
    if heartbeat is not None:
        heartbeat.finishing()
    bare = strategy.bare(model)
    test = evaluate(bare, data, ranks, device, per_rank_batch)
    marks["evaluation_done"] = time.time()
    flat = models.flat_parameters(bare)
    payload = {
        "records": run.records,
        "timed_wall_s": run.timed_wall_s,
        "tail": run.tail(),
        "test": test,
        "peak_rss_mb": timers.peak_rss_mb(),
        "cuda_max_allocated_mb": timers.cuda_max_allocated_mb(device),
        "optimizer_state_bytes": strategy.optimizer_state_bytes(optimizer),
        "cpu": run.cpu,
        "started": {k: marks.get(k) for k in ("ranks_started", "imports_done")},
    }
    spread = rank_spread(flat)
    extra = strategy.extra(model, ctx)
    if params.profile_steps:  # after everything above has read the trained model
        payload["profile"] = profile_steps(model, optimizer, strategy, ctx, loader, sampler, run.steps, global_batch, bare)
    write_steps(out / f"steps_rank{ranks.rank}.csv", run.records)
    payloads = gather_to_rank0(payload)
    if ranks.rank != 0:
        return None
    # init_process_group waits for every rank: the last rank's start is the one that counts.
    for mark in ("ranks_started", "imports_done"):
        started = [p["started"][mark] for p in payloads if p["started"].get(mark) is not None]
        if started:
            marks[mark] = max(started)
    if dump_params is not None:
        dump_params.parent.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in bare.state_dict().items()}, dump_params)

    timed_wall = max(p["timed_wall_s"] or 0.0 for p in payloads)
    stats = run_output.step_statistics([p["records"] for p in payloads], timed_wall, len(data.train))
    if params.profile_steps:
        profiling.write_profile(out / "profile.csv", [row for p in payloads for row in p["profile"]["rows"]])
        stats.update(profiling.summary_fields([p["profile"]["step_s"] for p in payloads], stats.get("step_time_median_s")))
        stats["profile_wall_s"] = max(p["profile"]["wall_s"] for p in payloads)
    loss_sum, correct, n = (sum(p["tail"][i] for p in payloads) for i in range(3))
    t_loss, t_correct, t_n = (sum(p["test"][i] for p in payloads) for i in range(3))
    cuda_mb = [p["cuda_max_allocated_mb"] for p in payloads if p["cuda_max_allocated_mb"] is not None]
    rss = [p["peak_rss_mb"] for p in payloads]
    stats.update(
        global_batch=global_batch,
        per_rank_batch=per_rank_batch,
        wall_time_s=time.perf_counter() - t_start,
        peak_rss_mb=max(rss),
        peak_rss_mb_per_rank=rss,
        cuda_max_allocated_mb=max(cuda_mb) if cuda_mb else None,
        train_loss_final=loss_sum / n if n else None,
        train_acc_final=correct / n if n else None,
        test_loss=t_loss / t_n if t_n else None,
        test_acc=t_correct / t_n if t_n else None,
        param_norm=float(flat.norm()),
    )
    state_bytes = [p["optimizer_state_bytes"] for p in payloads]
    short = stats["timed_steps"] < params.min_timed_steps or (stats.get("timed_wall_s") or 0.0) < params.min_timed_s
    extra = {
        "steps_per_epoch": len(sampler),
        "first_timed_step": first_timed,
        "steps_run": run.steps,
        "measurement_short": short,  # max_steps or the timeout stopped it before the minimums
        "comm_volume": strategy.comm_volume,
        "oversubscribed": device.type == "cpu" and oversubscribed(threads or 1, ranks.local_world),
        "forked_from_threads": FORKED_FROM_THREADS,
        "model_parameters": flat.numel(),
        **dict(zip(("training_health", "training_health_reason"),
                   run_output.training_health([r["loss"] for r in sorted(run.records, key=lambda r: r["step"])]))),  # fmt: skip
        "param_rank_max_abs_diff": spread,
        "optimizer_state_bytes": max(state_bytes),  # the largest rank's
        "optimizer_state_bytes_total": sum(state_bytes),
        **extra,
        **(autobatch.extra(auto) if auto else {}),
    }
    if initial is not None:
        extra.update(deviation_from_single(initial, bare, data, params, device, run.steps, global_batch))
        extra["accuracy_reached"] = stats["test_acc"]
    reason = "" if stats["timed_steps"] else "no timed steps: total steps <= 1 + warmup_steps"
    backend = dist.get_backend() if dist.is_initialized() else None
    env = sysinfo.environment(backend, threads, started=wall_clock(t_start))
    env.update(loadavg_start=load_start, loadavg_end=sysinfo.loadavg())
    env.update(sysinfo.other_cpu([p["cpu"] for p in payloads], timed_wall))
    return run_output.make_summary("ok", reason, params.as_dict(), ranks.world, ranks.nodes, env, stats, extra)


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
    ||single||_2 over all parameters; single_*: the replay's final train loss and test accuracy.
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
    loss, _, n = run.tail()
    _, t_correct, t_n = evaluate(initial, data, Ranks(), device, max(global_batch, 64))
    return {
        "param_deviation_from_single": worst,
        "param_deviation_from_single_l2": float((a - b).norm() / b.norm().clamp_min(1e-12)),
        "single_train_loss_final": loss / n if n else None,
        "single_test_acc": t_correct / t_n if t_n else None,
    }


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


class LoopResult:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.timed_wall_s: float | None = None
        self.last = collections.deque(maxlen=TAIL_STEPS)  # (loss, correct, samples) per step
        self.steps = 0  # steps run (the plan, extended to the timing minimums)
        self.cpu: dict[str, Any] = {}  # CPU time during the timed steps (sysinfo.cpu_snapshot)
        self.timing_started: float | None = None  # wall clock (epoch s) at the first timed step's start

    def tail(self) -> tuple[float, int, int]:
        """Sums over the last steps: (loss x samples, correct, samples)."""
        return (
            sum(float(loss) * n for loss, _, n in self.last),
            sum(int(c) for _, c, _ in self.last),
            sum(n for _, _, n in self.last),
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


def _agreed_max(values: list[float], device: torch.device) -> list[float]:
    """Element-wise maximum over ranks (one collective), so every rank decides alike."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


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
    heartbeat = ctx.heartbeat
    timer = timers.StepTimer(ctx.clock, ctx.instrument, on_lap=heartbeat.lap if heartbeat else None)
    recorder = StepRecorder(ctx.clock, ctx.rank)
    meter, device, instrument = ctx.meter, ctx.device, ctx.instrument
    first_timed = 1 + ctx.params.warmup_steps if first_timed is None else first_timed
    inject = _injection(ctx.rank)
    timing, checks = False, 0 if instrument else MAX_TIMING_CHECKS
    loop_start = time.perf_counter()
    model.train()
    step, epoch, batches = first_step, None, None
    while True:
        if step >= total_steps:
            if checks >= MAX_TIMING_CHECKS or not timing:
                break
            # End of the plan: enough timed seconds? (A pause: not in the timed wall.)
            recorder.settle(0)
            timed_s, elapsed = _agreed_max([recorder.timed_wall_s, time.perf_counter() - loop_start], device)
            total_steps += more_steps(ctx.params, step - first_timed, timed_s, elapsed, step)
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
        if inject and inject[0] != "slow" and inject[1] == step:
            _inject(inject[0], ctx.rank, step)
        timed = instrument and step >= first_timed
        if timed and not timing:
            timing = True
            result.timing_started = time.time()
            result.cpu["start"] = sysinfo.cpu_snapshot()
        timer.begin()
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        timer.lap("data")
        if inject and inject[0] == "slow":
            time.sleep(inject[1] / 1000)  # charged to forward: a slower rank
        scale = ctx.world * len(y) / global_batch
        loss, correct = strategy.forward_backward(model, x, y, scale, timer)
        samples = strategy.counted_samples(len(y), ctx)
        strategy.sync_gradients(model, ctx)
        timer.lap("comm")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        timer.lap("optimizer")
        strategy.after_step(model, optimizer, ctx)
        timer.lap("comm")
        result.last.append((loss, correct, samples))
        if instrument:
            recorder.push(timer.close(), meter.take(), step, epoch, timed, loss, samples)
        if on_step is not None:
            on_step()
        step += 1
    recorder.settle(0)
    result.steps = step
    result.records = recorder.records
    if timing:
        result.timed_wall_s = recorder.timed_wall_s
        result.cpu["end"] = sysinfo.cpu_snapshot()
    return result


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


def oversubscribed(threads: int, local_world: int) -> bool:
    """More busy threads on this node than usable cores (CPU cells)."""
    return threads * local_world > sysinfo.usable_cores()


def _injection(rank: int) -> tuple[str, int] | None:
    spec = os.environ.get("DDPBENCH_INJECT", "")
    if not spec:
        return None
    kind, r, s = spec.split(":")
    return (kind, int(s)) if int(r) == rank else None


def _inject(kind: str, rank: int, step: int) -> None:
    if kind == "fill":
        with open(os.environ["DDPBENCH_FILL"], "ab", buffering=0) as filler:
            with contextlib.suppress(OSError):  # ENOSPC: the disk is full
                while True:
                    filler.write(b"\0" * 4096)
        return
    if kind == "hang":
        time.sleep(10**6)
    if kind == "kill":  # what the kernel's out-of-memory killer does
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "oom":  # a real failed allocation, under an address-space limit
        import resource

        held = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (held + 2**28, resource.getrlimit(resource.RLIMIT_AS)[1]))
        torch.empty(2**33, dtype=torch.uint8).fill_(1)
    if kind == "grow":  # touch memory until the kernel's out-of-memory killer stops this rank
        hog = []
        while True:
            hog.append(torch.ones(2**26, dtype=torch.uint8))
    raise RuntimeError(f"injected failure (DDPBENCH_INJECT) in rank {rank} at step {step}")


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: datamod.Data, ranks: Ranks, device: torch.device, batch: int):
    """This rank's share of the test set: (loss sum, correct, samples)."""
    was_training = model.training
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for x, y in datamod.test_batches(data, ranks.rank, ranks.world, max(batch, 64)):
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss_sum += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
        correct += int((out.argmax(1) == y).sum())
        n += len(y)
    model.train(was_training)
    return loss_sum, correct, n


def rank_spread(flat: torch.Tensor) -> float:
    """Largest difference of any parameter between ranks (0 when they agree exactly)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return 0.0
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    return float((hi - lo).max())


def gather_to_rank0(payload: dict[str, Any]) -> list[dict[str, Any]]:
    if not dist.is_initialized():
        return [payload]
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(payload, gathered, dst=0)
    return gathered or []


def write_steps(path: Path, records: list[dict[str, Any]]) -> None:
    """Atomically, like every output (safe_io): a failed write (a full disk) leaves no temporary."""
    with safe_io.atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=run_output.STEP_COLUMNS)
        writer.writeheader()
        writer.writerows(records)


if __name__ == "__main__":
    code = main()  # the summary, steps and error files are written and closed, the group destroyed
    freeze_for_exit()
    raise SystemExit(code)
