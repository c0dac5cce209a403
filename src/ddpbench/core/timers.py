"""Timers of a training step inside a rank: a device-aware clock, per-step phase marks and
timers, a communication meter, and memory peaks.

Definitions follow docs/metrics.md: a step's time
is the maximum over ranks, read by core.run_output from the per-rank records these timers write;
phases partition a step (data + forward + backward + exposed comm + optimizer + other).
Imported by the training loop and the strategies; torch only on CUDA, on first use.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from typing import Any, Callable, Iterable

from ddpbench.core.run_output import PHASES


class Clock:
    """Time stamps that account for asynchronous device work without serialising it.

    On CPU a stamp is `time.perf_counter()`. On CUDA a stamp is an event recorded on the
    current stream, with no synchronisation: kernels keep overlapping with the host, so
    the loop measures the throughput users get. `wait(stamp)` blocks until the device has
    reached a stamp (once per step, a step late: loop.StepRecorder); `elapsed(a, b)`
    is the time between two reached stamps in seconds. `now()` synchronises and reads the
    host clock: for code outside the timed phases (and the pipeline's per-micro-batch
    accounting, which synchronises on CUDA: a known cost of that strategy's timing).
    """

    def __init__(self, device_type: str = "cpu"):
        self.cuda = device_type == "cuda"
        if self.cuda:
            import torch

            self._torch = torch

    def now(self) -> float:
        if self.cuda:
            self._torch.cuda.synchronize()
        return time.perf_counter()

    def stamp(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def wait(self, stamp: Any) -> None:
        if self.cuda:
            stamp.synchronize()

    def elapsed(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1000.0 if self.cuda else b - a


class StepMarks:
    """The stamps of one closed step, turned into durations by `resolve` once the device
    has reached the last of them: `phases`, `total` (first to last stamp) and `wall_end`
    (the host clock when the wait returned). `first`/`last` are the step's first and last
    stamps (the loop measures the time between consecutive steps' last stamps)."""

    def __init__(self, marks: list[tuple[str | None, Any, dict[str, float] | None]]):
        self.marks = marks
        self.phases = dict.fromkeys(PHASES, 0.0)
        self.total = 0.0
        self.wall_end = 0.0

    @property
    def first(self) -> Any:
        return self.marks[0][1]

    @property
    def last(self) -> Any:
        return self.marks[-1][1]

    def resolve(self, clock: "Clock") -> "StepMarks":
        clock.wait(self.last)
        self.wall_end = time.perf_counter()
        for (_, a, _), (phase, b, parts) in zip(self.marks, self.marks[1:]):
            lap = clock.elapsed(a, b)
            for name, seconds in (parts or {}).items():
                self.phases[name] += seconds
                lap -= seconds
            self.phases[phase] += lap
        self.total = clock.elapsed(self.first, self.last)
        return self


class StepTimer:
    """Phase durations of one step, measured as laps: `lap(phase)` charges the time since
    the previous lap to `phase` (phases may recur, e.g. comm before and after the step).

    Laps only record stamps. `close()` hands the step's stamps over without waiting (the
    training loop resolves them a step later, so the host prepares the next step while the
    device finishes this one, as an uninstrumented loop does); `end()` closes and resolves
    at once, waiting for the device, and sets `phases`, `total` and the host clock's
    `wall_start`/`wall_end`."""

    def __init__(self, clock: Clock, enabled: bool = True, on_lap: Callable[[], None] | None = None):
        self.clock, self.enabled, self.on_lap = clock, enabled, on_lap  # on_lap: progress (a heartbeat)
        self.phases = dict.fromkeys(PHASES, 0.0)
        self.total = 0.0
        self.wall_start = self.wall_end = 0.0
        self._marks: list[tuple[str | None, Any, dict[str, float] | None]] = []

    def begin(self) -> None:
        if self.enabled:
            self.phases = dict.fromkeys(PHASES, 0.0)
            self.wall_start = time.perf_counter()
            self._marks = [(None, self.clock.stamp(), None)]

    def lap(self, phase: str) -> None:
        if self.enabled:
            self._marks.append((phase, self.clock.stamp(), None))
        if self.on_lap is not None:
            self.on_lap()

    def lap_split(self, parts: dict[str, float], rest: str) -> None:
        """Close a lap that mixed phases: charge the measured `parts` (seconds) to their
        phases and the remainder of the lap to `rest` (e.g. a pipeline step: forward and
        backward compute measured per micro-batch, the idle rest is communication)."""
        if self.enabled:
            self._marks.append((rest, self.clock.stamp(), dict(parts)))
        if self.on_lap is not None:
            self.on_lap()

    def stamp_of(self, phase: str) -> Any:
        """The stamp that closed the latest lap of `phase` in this step (None when not enabled or
        no such lap yet): e.g. the end of forward, where backward starts (strategies.ddp)."""
        for name, stamp, _ in reversed(self._marks):
            if name == phase:
                return stamp
        return None

    def close(self) -> StepMarks:
        marks, self._marks = self._marks, []
        return StepMarks(marks)

    def end(self) -> None:
        if not self.enabled:
            return
        done = self.close().resolve(self.clock)
        self.phases, self.total, self.wall_end = done.phases, done.total, done.wall_end


class CommMeter:
    """Communication of the current step: calls, bytes this rank sent, and communication
    timed inside another phase (`hidden[phase] = [comm_s, exposed_s]`): DDP's buckets run
    inside backward, ZeRO's parameter broadcast inside the optimizer step. The loop moves
    the exposed part out of that phase into exposed communication."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.bytes = 0
        self.hidden: dict[str, list[float]] = {}
        self._deferred: list[Callable[[Clock, CommMeter], None]] = []

    def defer(self, account: Callable[[Clock, "CommMeter"], None]) -> None:
        """Account for stamps once the step's end has been waited for (`resolve`): reading
        a CUDA event's time earlier would synchronise in the middle of the step.
        `account(clock, meter)` charges the meter it is given: the step's own, taken over
        by `take` before the loop resolves it."""
        self._deferred.append(account)

    def resolve(self, clock: Clock) -> None:
        for account in self._deferred:
            account(clock, self)
        self._deferred = []

    def take(self) -> "CommMeter":
        """This step's communication (resolved later), leaving the meter empty for the next."""
        taken = CommMeter()
        taken.calls, taken.bytes, taken.hidden, taken._deferred = self.calls, self.bytes, self.hidden, self._deferred
        self.reset()
        return taken

    def add(self, calls: int = 1, nbytes: int = 0) -> None:
        self.calls += calls
        self.bytes += nbytes

    def overlapped(self, comm_s: float, exposed_s: float, phase: str = "backward") -> None:
        """Communication of `comm_s` seconds inside `phase`, `exposed_s` of it not hidden."""
        acc = self.hidden.setdefault(phase, [0.0, 0.0])
        acc[0] += comm_s
        acc[1] += exposed_s

    def blocking(self, seconds: float, phase: str) -> None:
        """Communication that blocked inside `phase`: all of it exposed."""
        self.overlapped(seconds, seconds, phase)

    @property
    def hidden_comm_s(self) -> float:
        return sum(c for c, _ in self.hidden.values())


def interval_union(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals (concurrent buckets count once)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def peak_rss_mb() -> float:
    """Peak resident set size of this process (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


def cuda_max_allocated_mb(device: Any) -> float | None:
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**20
