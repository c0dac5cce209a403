"""A torch.profiler breakdown of a run's steps (cell parameter `profile_steps`, issue 13).

Why its own steps: the profiler slows what it watches, so a run's timed figures must never
include a profiled step. After the timed steps (and the evaluation, which reads the trained
model), every rank runs one untimed profiler warm-up step and then `profile_steps` steps of
the same strategy under torch.profiler (CPU activity, and CUDA on a GPU); the model's
parameters are put back afterwards, so nothing the run reports depends on them.

Per rank and activity, `top_table` keeps the TOP_K operators by self time and one `other`
row, in seconds per profiled step and as shares that sum to 1 (see `top_table`); rank 0
writes every rank's table as the run's profile.csv. `profile_overhead` in summary.json is
the profiler's own cost, measured: the median profiled step (slowest rank) over the median
timed step, minus 1.
"""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

from ddpbench.core import safe_io
from ddpbench.core.run_output import PROFILE_COLUMNS

TOP_K = 15
OTHER = "other"
#: The profiler's annotation of each step (ProfilerStep#N): not an operator; its self time
#: is the time in no operator, which `other` holds.
STEP_ANNOTATION = "ProfilerStep"
#: Operators that communicate: c10d's ops (c10d::allreduce_, c10d::send), the backends'
#: collectives as the profiler names them (gloo:all_reduce, nccl:all_reduce) and NCCL's
#: kernels (ncclDevKernel_...). Not aten's gather/scatter/broadcast_to: those are indexing.
COMM_PATTERN = re.compile(r"^(c10d::|gloo:|nccl:|mpi:|ucc:)|nccl", re.IGNORECASE)


def is_comm(op: str) -> bool:
    return bool(COMM_PATTERN.search(op))


def activities(device_type: str) -> list:
    """The profiler activities of a run on this device: CPU, and CUDA on a GPU."""
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device_type == "cuda" else [])]


def profile(device_type: str, steps: int, run_steps: Callable[[Callable[[], None]], Any]) -> tuple[Any, Any]:
    """Run `run_steps(step_done)` (1 + `steps` training steps, calling `step_done()` after
    each) under torch.profiler: the first step is the profiler's warm-up (not recorded), the
    next `steps` are recorded. Returns (the profiler's key averages, run_steps' result)."""
    import torch.profiler as tp

    schedule = tp.schedule(wait=0, warmup=1, active=steps, repeat=1)
    with tp.profile(activities=activities(device_type), schedule=schedule) as prof:
        result = run_steps(prof.step)
    return prof.key_averages(), result


def _self_us(event: Any, activity: str) -> float:
    """An operator's self time (µs) on `activity`. A collective that runs on the backend's
    own thread (gloo:all_reduce, an async event) has no self time on the caller's: its
    span, enqueue to completion, is what it costs and is counted instead."""
    if activity == "cuda":
        return float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0) or 0)
    if getattr(event, "is_async", False):
        return float(event.cpu_time_total or 0)
    return float(event.self_cpu_time_total or 0)


def operator_times(key_averages: Sequence[Any], activity: str) -> list[tuple[str, int, float]]:
    """(operator, calls, self seconds) of every profiled operator on `activity` with any
    self time there: for `cuda`, the device's own events (kernels, copies; the CPU operators
    that launched them would count them twice). Not the profiler's step annotation."""
    from torch.autograd import DeviceType

    out = []
    for event in key_averages:
        if str(event.key).startswith(STEP_ANNOTATION):  # the profiler's own span of a whole step
            continue
        on_device = getattr(event, "device_type", DeviceType.CPU) != DeviceType.CPU
        if activity == "cuda" and not on_device:
            continue
        if activity == "cpu" and on_device:
            continue
        us = _self_us(event, activity)
        if us > 0:
            out.append((str(event.key), int(event.count), us * 1e-6))
    return out


def top_table(ops: Sequence[tuple[str, int, float]], steps: int, step_s: float, k: int = TOP_K) -> list[dict[str, Any]]:
    """The `k` operators with the most self time and an `other` row, per profiled step.

    `share` is of the profiled step time `step_s` (this rank's, per step); `other` holds the
    remaining operators and the time in no operator (Python, the loop, waiting). Where the
    operators' times add up to more than the step (a collective on the backend's thread
    overlapping the caller's computation: DDP; several threads), shares are of their sum
    instead, and `other` holds only the remaining operators. Either way they sum to 1.
    Sorted by self time, `other` last."""
    steps = max(steps, 1)
    ranked = sorted(ops, key=lambda o: (-o[2], o[0]))
    top, rest = ranked[:k], ranked[k:]
    total = sum(s for _, _, s in ops) / steps
    per_step = max(step_s, total)
    rows = [
        {"op": op, "comm": int(is_comm(op)), "calls": calls / steps, "self_s_per_step": s / steps} for op, calls, s in top
    ]
    other_s = per_step - sum(r["self_s_per_step"] for r in rows)
    rows.append({"op": OTHER, "comm": 0, "calls": sum(c for _, c, _ in rest) / steps, "self_s_per_step": max(other_s, 0.0)})
    for row in rows:
        row["share"] = row["self_s_per_step"] / per_step if per_step > 0 else 0.0
    return rows


def rank_tables(key_averages: Sequence[Any], device_type: str, steps: int, step_s: float, rank: int) -> list[dict[str, Any]]:
    """This rank's rows of profile.csv: one top table per profiled activity."""
    rows = []
    for activity in ("cpu", "cuda") if device_type == "cuda" else ("cpu",):
        table = top_table(operator_times(key_averages, activity), steps, step_s)
        rows += [{"rank": rank, "activity": activity, **row} for row in table]
    return rows


def step_seconds(records: Sequence[dict[str, Any]], skip: int = 1) -> list[float]:
    """Wall seconds of each recorded profiled step of one rank (the first `skip`: warm-up)."""
    return [r["total_s"] for r in sorted(records, key=lambda r: r["step"])[skip:]]


def summary_fields(per_rank_steps: Sequence[Sequence[float]], timed_median_s: float | None) -> dict[str, Any]:
    """profiled_step_s: the median over profiled steps of the slowest rank's step (as the
    timed step time is); profile_overhead = profiled_step_s / timed step median - 1."""
    steps = [max(ranks) for ranks in zip(*per_rank_steps)]
    if not steps:
        return {"profiled_step_s": None, "profile_overhead": None}
    profiled = statistics.median(steps)
    overhead = profiled / timed_median_s - 1 if timed_median_s else None
    return {"profiled_step_s": profiled, "profile_overhead": overhead}


def write_profile(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Atomically, like every output of a run (safe_io)."""
    with safe_io.atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=PROFILE_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
