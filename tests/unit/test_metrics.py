"""Unit tests of ddpbench.core.run_output and ddpbench.core.timers. Every expected number is worked by hand (in the comments),
never produced by the function under test."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ddpbench import strategies
from ddpbench.core import run_output
from ddpbench.core import timers


class FakeTime:
    """Stands in for the `time` module inside core.timers: perf_counter() reads `t`."""

    def __init__(self, t=0.0):
        self.t = t

    def perf_counter(self):
        return self.t


@pytest.fixture
def wall(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(timers, "time", fake)
    return fake


# -- comm_volume_factor --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("law", "ps", "factors"),
    [
        ("allreduce", [1, 2, 4, 8], [0.0, 1.0, 1.5, 1.75]),  # 2(p-1)/p
        ("gather_scatter", [1, 2, 4, 32], [0, 1, 3, 31]),  # p-1
        ("allreduce_allgather", [1, 2, 4, 8], [0.0, 1.5, 2.25, 2.625]),  # 3(p-1)/p
        ("point_to_point", [1, 2, 4, 8], [1, 1, 1, 1]),
        ("none", [1, 2, 4, 8], [0, 0, 0, 0]),
    ],
)
def test_comm_volume_laws(law, ps, factors):
    for p, factor in zip(ps, factors):
        assert strategies.comm_volume_factor(law, p) == pytest.approx(factor)
    # On an array of world sizes: one factor per world size, same shape.
    out = np.asarray(strategies.comm_volume_factor(law, np.array(ps)))
    assert out.shape == (len(ps),)
    np.testing.assert_allclose(out, factors)


def test_unknown_comm_volume_law_is_named_with_the_known_ones():
    known = "allreduce, gather_scatter, allreduce_allgather, sharded_zero3, sharded_zero2, point_to_point, none"
    with pytest.raises(ValueError, match=rf"^unknown communication volume law 'ring'; known: {known}$"):
        strategies.comm_volume_factor("ring", 2)


# -- Clock ----------------------------------------------------------------------------------------


def test_cpu_clock_stamps_read_perf_counter_and_elapsed_is_b_minus_a(wall):
    clock = timers.Clock()  # CPU by default
    assert clock.cuda is False
    wall.t = 10.0
    a = clock.stamp()
    wall.t = 10.75
    b = clock.stamp()
    assert (a, b) == (10.0, 10.75)
    assert clock.elapsed(a, b) == 0.75
    clock.wait(b)  # a float: nothing to wait for on CPU (would fail if it tried)
    wall.t = 12.5
    assert clock.now() == 12.5


class FakeEvent:
    """torch.cuda.Event without a GPU: records the fake device time (seconds) and records
    which events were waited for."""

    device_t = 0.0
    waited: list = []

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.t = None

    def record(self):
        self.t = FakeEvent.device_t

    def synchronize(self):
        FakeEvent.waited.append(self)

    def elapsed_time(self, other):  # milliseconds, as torch's
        return (other.t - self.t) * 1000.0


@pytest.fixture
def fake_cuda(monkeypatch, wall):
    """torch.cuda with fake events; counts device-wide synchronisations."""
    import torch

    syncs = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(wall.t))
    monkeypatch.setattr(FakeEvent, "device_t", 0.0)
    monkeypatch.setattr(FakeEvent, "waited", [])
    return syncs


def test_cuda_clock_stamps_are_recorded_events_and_elapsed_is_in_seconds(fake_cuda):
    clock = timers.Clock("cuda")
    assert clock.cuda is True
    FakeEvent.device_t = 2.0
    a = clock.stamp()
    FakeEvent.device_t = 2.25
    b = clock.stamp()
    assert isinstance(a, FakeEvent) and (a.t, b.t) == (2.0, 2.25)
    assert clock.elapsed(a, b) == pytest.approx(0.25)  # 250 ms
    assert fake_cuda == []  # stamping never synchronises the device


def test_cuda_clock_wait_synchronises_on_the_stamp_only(fake_cuda):
    clock = timers.Clock("cuda")
    a = clock.stamp()
    clock.wait(a)
    assert FakeEvent.waited == [a] and fake_cuda == []


def test_cuda_clock_now_synchronises_the_device_then_reads_the_host_clock(fake_cuda, wall):
    clock = timers.Clock("cuda")
    wall.t = 7.5
    assert clock.now() == 7.5
    assert fake_cuda == [7.5]


# -- StepTimer ------------------------------------------------------------------------------------


class FakeClock:
    """A clock whose stamps are the time `t` the test sets; records the stamps waited for."""

    def __init__(self):
        self.t, self.waited, self.stamps = 0.0, [], 0

    def stamp(self):
        self.stamps += 1
        return self.t

    def wait(self, stamp):
        self.waited.append(stamp)

    def elapsed(self, a, b):
        return b - a


def laps(timer, clock, start, marks):
    """begin() at `start`, then lap(phase) at each (time, phase)."""
    clock.t = start
    timer.begin()
    for t, phase in marks:
        clock.t = t
        timer.lap(phase)


def test_step_timer_charges_each_lap_to_its_phase_and_recurring_phases_add(wall):
    clock = FakeClock()
    timer = timers.StepTimer(clock)
    wall.t = 100.0
    laps(timer, clock, 10.0, [(10.5, "data"), (11.25, "forward"), (11.5, "comm"), (12.0, "comm")])
    wall.t = 103.0
    timer.end()
    assert timer.phases == {"data": 0.5, "forward": 0.75, "backward": 0.0, "comm": 0.75, "optimizer": 0.0}
    assert timer.total == 2.0  # 12.0 - 10.0
    assert (timer.wall_start, timer.wall_end) == (100.0, 103.0)
    assert clock.waited == [12.0]  # one wait, on the last stamp


def test_step_timer_begin_resets_phases_and_wall_start_between_steps(wall):
    clock = FakeClock()
    timer = timers.StepTimer(clock)
    wall.t = 100.0
    laps(timer, clock, 10.0, [(10.5, "data"), (11.0, "comm")])
    wall.t = 101.0
    timer.end()
    # The clocks move on between steps (bookkeeping outside the timer).
    wall.t = 200.0
    laps(timer, clock, 20.0, [(20.25, "data"), (21.0, "backward")])
    wall.t = 202.0
    timer.end()
    assert timer.phases == {"data": 0.25, "forward": 0.0, "backward": 0.75, "comm": 0.0, "optimizer": 0.0}
    assert timer.total == 1.0  # 21.0 - 20.0: the gap since the last step is not in it
    assert (timer.wall_start, timer.wall_end) == (200.0, 202.0)
    assert clock.waited == [11.0, 21.0]


def test_step_timer_lap_split_charges_parts_and_the_rest(wall):
    clock = FakeClock()
    timer = timers.StepTimer(clock)
    laps(timer, clock, 0.0, [(0.5, "forward")])
    clock.t = 2.5
    parts = {"forward": 0.25, "backward": 0.5}
    timer.lap_split(parts, rest="comm")
    parts["forward"] = 99.0  # the timer keeps its own copy
    timer.end()
    # Lap 0.5..2.5 = 2.0 s: 0.25 forward, 0.5 backward, the remaining 1.25 comm.
    assert timer.phases == {"data": 0.0, "forward": 0.75, "backward": 0.5, "comm": 1.25, "optimizer": 0.0}
    assert timer.total == 2.5


def test_stamp_of_is_the_latest_lap_of_a_phase_in_this_step(wall):
    """Where DDP reads backward's start (the end of forward) and end from the loop's own laps."""
    clock = FakeClock()
    timer = timers.StepTimer(clock)
    laps(timer, clock, 0.0, [(0.5, "data"), (1.0, "forward"), (2.0, "backward"), (2.5, "forward"), (4.0, "backward")])
    assert (timer.stamp_of("forward"), timer.stamp_of("backward"), timer.stamp_of("optimizer")) == (2.5, 4.0, None)
    timer.close()
    assert timer.stamp_of("forward") is None  # a closed step's stamps are gone
    off = timers.StepTimer(clock, enabled=False)
    laps(off, clock, 0.0, [(1.0, "forward")])
    assert off.stamp_of("forward") is None


def test_disabled_step_timer_takes_no_stamps_and_never_waits(wall):
    clock = FakeClock()
    timer = timers.StepTimer(clock, enabled=False)
    wall.t = 100.0
    laps(timer, clock, 1.0, [(2.0, "data")])
    timer.lap_split({"forward": 0.5}, rest="comm")
    timer.end()
    assert timer.phases == dict.fromkeys(run_output.PHASES, 0.0)
    assert (timer.total, timer.wall_start, timer.wall_end) == (0.0, 0.0, 0.0)
    assert clock.stamps == 0 and clock.waited == []


def test_cuda_timing_uses_events_and_one_wait_per_step(fake_cuda):
    """On CUDA the phases come from events and the step synchronises once, at its end, on
    the last event: no device-wide synchronize at phase boundaries (which would remove the
    CPU-GPU overlap the loop is meant to measure). Durations: ms from events -> seconds."""
    clock = timers.Clock("cuda")
    timer, meter = timers.StepTimer(clock), timers.CommMeter()
    for step in range(3):
        FakeEvent.device_t = 10.0 * step
        timer.begin()
        for dt, phase in ((0.5, "data"), (0.25, "forward"), (1.0, "backward")):
            FakeEvent.device_t += dt
            timer.lap(phase)
        a = clock.stamp()  # a collective of 0.125 s inside the 0.25 s optimizer step
        FakeEvent.device_t += 0.125
        meter.defer(lambda c, m, a=a, b=clock.stamp(): m.blocking(c.elapsed(a, b), "optimizer"))
        FakeEvent.device_t += 0.125
        timer.lap("optimizer")
        timer.end()
        meter.resolve(clock)
        assert timer.phases == {"data": 0.5, "forward": 0.25, "backward": 1.0, "comm": 0.0, "optimizer": 0.25}
        assert timer.total == 2.0
        assert meter.hidden == {"optimizer": [0.125, 0.125]}
        assert [e.t for e in FakeEvent.waited] == [10.0 * s + 2.0 for s in range(step + 1)]  # the last lap's
        meter.reset()
    assert fake_cuda == []


# -- CommMeter ------------------------------------------------------------------------------------


def test_comm_meter_add_counts_calls_and_bytes():
    m = timers.CommMeter()
    assert (m.calls, m.bytes, m.hidden) == (0, 0, {})
    m.add()  # one call, no bytes by default
    m.add(2, 10)
    m.add(nbytes=5)
    assert (m.calls, m.bytes) == (4, 15)


def test_comm_meter_accumulates_per_phase_and_resets():
    m = timers.CommMeter()
    m.add(2, 10)
    m.overlapped(1.0, 0.5)  # backward by default
    m.overlapped(0.5, 0.25)
    m.overlapped(1.0, 0.25, "optimizer")
    m.blocking(0.5, "optimizer")  # all of it exposed
    assert m.hidden == {"backward": [1.5, 0.75], "optimizer": [1.5, 0.75]}
    assert m.hidden_comm_s == 3.0  # 1.5 + 1.5: the communication, not its exposed part
    m.reset()
    assert (m.calls, m.bytes, m.hidden, m.hidden_comm_s) == (0, 0, {}, 0)


def test_comm_meter_resolves_deferred_accounts_in_order_once():
    m, clock, seen = timers.CommMeter(), object(), []
    m.defer(lambda c, meter: seen.append(("first", c, meter)))
    m.defer(lambda c, meter: seen.append(("second", c, meter)))
    assert seen == []  # nothing before resolve
    m.resolve(clock)
    assert seen == [("first", clock, m), ("second", clock, m)]
    m.resolve(clock)  # resolved accounts are cleared
    assert len(seen) == 2


def test_comm_meter_reset_drops_deferred_accounts():
    m, seen = timers.CommMeter(), []
    m.defer(lambda c, meter: seen.append(c))
    m.reset()
    m.resolve("clock")
    assert seen == []


def test_comm_meter_take_hands_over_the_step_and_its_accounts_charge_the_taken_meter():
    """The loop resolves a step after the next has begun: its deferred accounts must land
    in that step's meter, not in the live one the next step is filling."""
    live = timers.CommMeter()
    live.add(2, 100)
    live.defer(lambda c, meter: meter.blocking(0.5, "optimizer"))
    step = live.take()
    live.add(1, 7)  # the next step
    step.resolve(None)
    assert (step.calls, step.bytes, step.hidden) == (2, 100, {"optimizer": [0.5, 0.5]})
    assert (live.calls, live.bytes, live.hidden) == (1, 7, {})


# -- DDP's bucket readiness ------------------------------------------------------------------------


def test_ready_fractions_are_hand_overs_on_backwards_computation():
    """Bucket i at (hand-over − start − held in earlier hooks) / (end − start − exposed): the time
    backward waited inside a hook and the exposed communication are not its computation."""
    from ddpbench.strategies.ddp import exposed_comm, ready_fractions

    times = [(1.0, 1.1, 1.5), (2.0, 2.05, 2.6)]  # (handed over, hook returned, completed)
    exposed = exposed_comm(times)
    assert exposed == pytest.approx(0.1 + 0.6)
    assert ready_fractions(times, 0.0, 2.8, exposed) == pytest.approx([1.0 / 2.1, 1.9 / 2.1])
    assert ready_fractions(times, 0.0, 0.5, exposed) == []  # no computation left: nothing to divide by


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_ddp_records_bucket_readiness_of_timed_steps_only_as_the_median_per_bucket(device, request):
    """From the hook's and the loop's stamps (CUDA: events, read in the deferred account, never
    synchronised), only the timed steps."""
    from ddpbench.core.run_record import text_numbers
    from ddpbench.strategies.ddp import DDP

    syncs = request.getfixturevalue("fake_cuda") if device == "cuda" else []
    ddp, clock = DDP(), timers.Clock(device)

    def at(t):  # a stamp at time t (s) on the device's clock
        if device == "cpu":
            return t
        FakeEvent.device_t = t
        return clock.stamp()

    ctx = SimpleNamespace(state={}, meter=timers.CommMeter(), timed=False)
    steps = [(False, 0.4), (True, 1.0), (True, 1.2), (True, 0.8)]  # (timed, the first bucket's hand-over)
    for timed, first in steps:
        ctx.timed = timed
        ctx.state["ddp_spans"] = [[at(2.0), at(2.05), at(2.6), 800],  # completion order
                                  [at(first), at(first + 0.1), at(first + 0.5), 400]]  # fmt: skip
        ctx.state["ddp_backward"] = (at(0.0), at(2.8))  # the end of forward, the end of backward
        ddp.sync_gradients(None, ctx)
        ctx.meter.take().resolve(clock)
    assert len(ctx.state["ddp_ready"]) == 3  # the untimed step is not summarised
    assert syncs == [] and (device == "cpu" or FakeEvent.waited == [])
    extra = ddp.extra(None, ctx)
    assert text_numbers(extra["bucket_ready"]) == pytest.approx([1.0 / 2.1, 1.9 / 2.1], rel=1e-3)  # the median step's
    assert extra["bucket_bytes"] == "400 800"  # in hand-over order
    assert ddp.extra(None, SimpleNamespace(state={})) == {}  # uninstrumented: nothing recorded


def test_bucket_fields_keep_the_most_common_bucket_count():
    from ddpbench.strategies.ddp import bucket_fields

    steps = [([0.1, 0.5], [1, 2]), ([0.3, 0.7], [1, 2]), ([0.2, 0.6], [1, 2]), ([0.9], [3])]
    assert bucket_fields(steps) == {"bucket_ready": "0.2 0.6", "bucket_bytes": "1 2"}
    assert bucket_fields([]) == {}


def test_closed_steps_resolve_later_with_one_wait_each(fake_cuda):
    """close() takes no wait: the host may start the next step before the device has
    finished this one; resolve() waits on the step's last event and yields its phases."""
    clock = timers.Clock("cuda")
    timer = timers.StepTimer(clock)
    closed = []
    for step in range(2):
        FakeEvent.device_t = 10.0 * step
        timer.begin()
        FakeEvent.device_t += 0.5
        timer.lap("data")
        FakeEvent.device_t += 1.5
        timer.lap("backward")
        closed.append(timer.close())
    assert FakeEvent.waited == [] and fake_cuda == []
    done = [c.resolve(clock) for c in closed]
    assert [d.total for d in done] == [2.0, 2.0]
    assert done[1].phases["data"] == 0.5 and done[1].phases["backward"] == 1.5
    assert clock.elapsed(done[0].last, done[1].last) == 10.0  # the time between steps' ends
    assert [e.t for e in FakeEvent.waited] == [2.0, 12.0]


# -- small helpers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("intervals", "covered"),
    [
        ([], 0.0),
        ([(2.0, 4.0), (0.0, 1.0)], 3.0),  # disjoint, unsorted
        ([(0.0, 2.0), (1.0, 3.0)], 3.0),  # overlapping: 0..3
        ([(0.0, 1.0), (1.0, 2.5)], 2.5),  # touching
        ([(0.0, 4.0), (1.0, 2.0), (5.0, 6.0)], 5.0),  # nested one skipped, later ones still count
        ([(-3.0, -2.0), (-2.5, -1.0)], 2.0),  # negative times (any clock origin)
    ],
)
def test_interval_union_counts_concurrent_time_once(intervals, covered):
    assert timers.interval_union(intervals) == pytest.approx(covered)


@pytest.mark.parametrize(
    ("q", "value"),
    # sorted [10, 20, 30, 40]: position 3q/100, linear between neighbours
    [(0, 10.0), (25, 17.5), (50, 25.0), (95, 38.5), (100, 40.0), (100 / 3, 20.0)],
)
def test_percentile_interpolates_linearly(q, value):
    assert run_output.percentile([40.0, 10.0, 30.0, 20.0], q) == pytest.approx(value)


def test_percentile_of_one_value_is_that_value():
    assert run_output.percentile([5.0], 95) == 5.0


def test_compute_s_is_data_forward_backward_optimizer():
    r = {"data_s": 0.5, "forward_s": 1.0, "backward_s": 2.0, "optimizer_s": 0.25, "comm_s": 8.0,
         "exposed_comm_s": 16.0, "other_s": 32.0, "total_s": 64.0}  # fmt: skip
    assert run_output.compute_s(r) == 3.75


def fake_rusage(monkeypatch, platform, maxrss):
    calls = []

    def getrusage(who):
        calls.append(who)
        return SimpleNamespace(ru_maxrss=maxrss)

    monkeypatch.setattr(timers, "resource", SimpleNamespace(RUSAGE_SELF="self", getrusage=getrusage))
    monkeypatch.setattr(timers, "sys", SimpleNamespace(platform=platform))
    return calls


def test_peak_rss_reads_kib_on_linux(monkeypatch):
    calls = fake_rusage(monkeypatch, "linux", 3584)  # KiB
    assert timers.peak_rss_mb() == 3.5
    assert calls == ["self"]


def test_peak_rss_reads_bytes_on_macos(monkeypatch):
    fake_rusage(monkeypatch, "darwin", 3584 * 1024)  # bytes
    assert timers.peak_rss_mb() == 3.5


def test_cuda_max_allocated_is_none_off_cuda():
    import torch

    assert timers.cuda_max_allocated_mb(torch.device("cpu")) is None
    assert timers.cuda_max_allocated_mb(None) is None


def test_cuda_max_allocated_converts_bytes_to_mb(monkeypatch):
    import torch

    device = SimpleNamespace(type="cuda")
    seen = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: seen.append(d) or 3.5 * 2**20)
    assert timers.cuda_max_allocated_mb(device) == 3.5
    assert seen == [device]


# -- step_statistics ------------------------------------------------------------------------------


def rec(total, timed=1, comm_calls=1, comm_bytes=100, samples=4, **phases):
    r = {"timed": timed, "total_s": total, "samples": samples, "comm_calls": comm_calls, "comm_bytes": comm_bytes}
    for p in run_output.SUMMARY_PHASES:
        r[f"{p}_s"] = phases.get(p, 0.0)
    return r


def balanced(total, comm_calls=1, **phases):
    """A rank's record whose phases add up to `total`, the rest charged to exposed comm."""
    exposed = total - sum(phases.values())
    return rec(total, comm_calls=comm_calls, exposed_comm=exposed, comm=exposed, **phases)


def uneven_run():
    """Two ranks, five steps; only steps 1-3 are timed on both ranks (step 0: rank 1 only,
    step 4: rank 0 only), and the untimed steps are huge so counting one would show.

    step | rank 0: compute, total | rank 1: compute, total | step time | pacing | gap (max-min)
      1  | 0.7, 1.0               | 0.5, 1.0               | 1.0       | rank 0 | 0.2
      2  | 0.7, 2.0               | 1.4, 1.7               | 2.0       | rank 1 | 0.7
      3  | 4.0, 6.0               | 1.0, 6.0               | 6.0       | rank 0 | 3.0
    """
    big = dict(comm_calls=100, comm_bytes=10**6, samples=1000, forward=40.0, exposed_comm=10.0)
    r0 = [
        rec(50.0, timed=0, **big),
        rec(1.0, comm_calls=2, comm_bytes=100, data=0.1, forward=0.2, backward=0.3, optimizer=0.1,
            comm=0.4, exposed_comm=0.2, other=0.1),
        rec(2.0, comm_calls=5, comm_bytes=700, data=0.1, forward=0.2, backward=0.3, optimizer=0.1,
            comm=1.2, exposed_comm=1.2, other=0.1),
        rec(6.0, comm_calls=10, comm_bytes=200, data=0.5, forward=1.0, backward=2.0, optimizer=0.5,
            comm=1.5, exposed_comm=1.0, other=1.0),
        rec(50.0, timed=1, **big),
    ]  # fmt: skip
    r1 = [
        rec(50.0, timed=1, **big),
        rec(1.0, comm_calls=3, comm_bytes=300, data=0.1, forward=0.1, backward=0.2, optimizer=0.1,
            comm=0.4, exposed_comm=0.4, other=0.1),
        rec(1.7, comm_calls=1, comm_bytes=200, data=0.2, forward=0.4, backward=0.6, optimizer=0.2,
            comm=0.3, exposed_comm=0.2, other=0.1),
        rec(6.0, comm_calls=2, comm_bytes=200, data=0.25, forward=0.25, backward=0.25, optimizer=0.25,
            comm=4.5, exposed_comm=4.5, other=0.5),
        rec(50.0, timed=0, **big),
    ]  # fmt: skip
    return [r0, r1]


@pytest.fixture
def uneven():
    return run_output.step_statistics(uneven_run(), timed_wall_s=3.2, dataset_size=100)


def test_step_statistics_take_the_pacing_rank_and_skip_untimed_steps(uneven):
    # A step counts only when every rank timed it: steps 1, 2, 3.
    assert (uneven["total_steps"], uneven["timed_steps"]) == (5, 3)
    # Pacing rank per step: 0, 1, 0.
    assert uneven["phase_data_s"] == pytest.approx(0.1 + 0.2 + 0.5)
    assert uneven["phase_forward_s"] == pytest.approx(0.2 + 0.4 + 1.0)
    assert uneven["phase_backward_s"] == pytest.approx(0.3 + 0.6 + 2.0)
    assert uneven["phase_comm_s"] == pytest.approx(0.4 + 0.3 + 1.5)
    assert uneven["phase_exposed_comm_s"] == pytest.approx(0.2 + 0.2 + 1.0)
    assert uneven["phase_optimizer_s"] == pytest.approx(0.1 + 0.2 + 0.5)
    # other: the pacing rank's own, plus in step 2 the gap from its total 1.7 to the step's 2.0.
    assert uneven["phase_other_s"] == pytest.approx(0.1 + (0.1 + 0.3) + 1.0)
    assert uneven["phase_total_s"] == pytest.approx(9.0)
    assert uneven["phase_imbalance_s"] == pytest.approx(0.2 + 0.7 + 3.0)


def test_step_time_median_mean_and_p95_over_timed_steps(uneven):
    # Step times 1, 2, 6 (slowest rank's total; step 2's is rank 0's 2.0, not rank 1's 1.7).
    assert uneven["step_time_median_s"] == pytest.approx(2.0)
    assert uneven["step_time_mean_s"] == pytest.approx(3.0)
    assert uneven["step_time_p95_s"] == pytest.approx(5.6)  # position 1.9: 2 + 0.9 * (6 - 2)


@pytest.mark.parametrize(
    ("phase", "seconds"),
    [("data", 0.8), ("forward", 1.6), ("backward", 2.9), ("comm", 2.2), ("exposed_comm", 1.4),
     ("optimizer", 0.8), ("other", 1.5), ("imbalance", 3.9)],
)  # fmt: skip
def test_phase_fractions_are_of_the_summed_step_time(uneven, phase, seconds):
    assert uneven[f"frac_{phase}"] == pytest.approx(seconds / 9.0)


def test_compute_comm_ratio_is_forward_backward_optimizer_over_exposed_comm(uneven):
    assert uneven["compute_comm_ratio"] == pytest.approx((1.6 + 2.9 + 0.8) / 1.4)


def test_comm_per_step_is_the_busiest_ranks_mean(uneven):
    assert uneven["comm_calls_per_step"] == pytest.approx((3 + 5 + 10) / 3)
    assert uneven["comm_bytes_per_step"] == pytest.approx((300 + 700 + 200) / 3)


def test_rank_skew_is_the_median_over_steps_of_gap_over_pacing_compute(uneven):
    assert uneven["rank_skew"] == pytest.approx(0.5)  # median(0.2/0.7, 0.7/1.4, 3.0/4.0)


def test_throughput_and_fixed_work_epoch_time(uneven):
    assert uneven["timed_wall_s"] == 3.2
    assert uneven["samples_per_s"] == pytest.approx(7.5)  # 3 steps x 2 ranks x 4 samples / 3.2 s
    assert uneven["epoch_time_s"] == pytest.approx(100 / 7.5)  # fixed work: 100 samples


def test_without_timed_wall_there_are_no_throughput_figures():
    s = run_output.step_statistics(uneven_run(), timed_wall_s=None, dataset_size=100)
    assert s["timed_steps"] == 3
    assert not {"timed_wall_s", "samples_per_s", "epoch_time_s"} & s.keys()


def test_phases_partition_the_step_under_rank_imbalance():
    """Rank 0 slowed in forward, blocking all-reduce: rank 1 waits inside its comm phase.
    The old per-phase max over ranks summed to ~1.4 of the step; the pacing rank's
    timeline sums to exactly 1, and the waiting shows as imbalance and skew, not comm."""
    slow = [balanced(0.070, data=0.001, forward=0.040, backward=0.004, optimizer=0.001) for _ in range(10)]
    fast = [balanced(0.070, data=0.001, forward=0.004, backward=0.004, optimizer=0.001) for _ in range(10)]
    s = run_output.step_statistics([slow, fast], timed_wall_s=0.7, dataset_size=400)
    parts = ("data", "forward", "backward", "exposed_comm", "optimizer", "other")
    assert sum(s[f"frac_{p}"] for p in parts) == pytest.approx(1.0)
    assert s["frac_exposed_comm"] == pytest.approx(0.024 / 0.070)  # the slow rank's own comm
    assert s["compute_comm_ratio"] == pytest.approx(0.045 / 0.024)
    assert s["frac_imbalance"] == pytest.approx(0.036 / 0.070)
    assert s["rank_skew"] == pytest.approx(0.036 / 0.046)


def test_weak_scaling_epoch_time_covers_the_whole_dataset():
    """Dataset 1000, per-rank batch 300, p = 2: 600 samples per step. Steps-per-epoch x
    step time would cover 600 of 1000 samples; fixed work covers all 1000."""
    ranks = [[rec(1.0, forward=0.5, samples=300) for _ in range(4)] for _ in range(2)]
    s = run_output.step_statistics(ranks, timed_wall_s=4.0, dataset_size=1000)
    assert s["samples_per_s"] == pytest.approx(600.0)
    assert s["epoch_time_s"] == pytest.approx(1000 / 600)


def test_fully_hidden_communication_has_no_ratio():
    s = run_output.step_statistics([[rec(1.0, comm_calls=4, forward=0.5, comm=0.25, other=0.5)]], 1.0, 4)
    assert s["frac_exposed_comm"] == 0.0
    assert s["compute_comm_ratio"] is None


def test_no_collective_calls_have_no_ratio():
    s = run_output.step_statistics([[rec(1.0, comm_calls=0, forward=0.5, exposed_comm=0.25, other=0.25)]], 1.0, 4)
    assert s["compute_comm_ratio"] is None


def test_zero_length_steps_have_no_fractions_and_zero_skew():
    s = run_output.step_statistics([[rec(0.0)], [rec(0.0)]], 1.0, 4)
    assert all(s[f"frac_{p}"] is None for p in (*run_output.SUMMARY_PHASES, "imbalance"))
    assert s["rank_skew"] == 0.0


def test_records_without_other_count_only_the_gap_to_the_step_time():
    fast, slow = rec(1.5, forward=1.0), rec(2.0, forward=0.5)
    del fast["other_s"]
    s = run_output.step_statistics([[fast], [slow]], 1.0, 4)
    assert s["phase_other_s"] == pytest.approx(0.5)  # the pacing (fast) rank's 1.5 vs 2.0


def test_no_timed_steps_give_only_counts():
    s = run_output.step_statistics([[rec(1.0, timed=0), rec(1.0, timed=0)]], 1.0, 2)
    assert s == {"total_steps": 2, "timed_steps": 0}


# -- summary.json ---------------------------------------------------------------------------------

SUMMARY_METRICS = (
    "global_batch", "per_rank_batch", "total_steps", "timed_steps",
    "step_time_median_s", "step_time_mean_s", "step_time_p95_s", "samples_per_s", "tokens_per_s", "epoch_time_s",
    "timed_wall_s", "wall_time_s",
    "phase_data_s", "phase_forward_s", "phase_backward_s", "phase_comm_s", "phase_exposed_comm_s",
    "phase_optimizer_s", "phase_other_s", "phase_total_s", "phase_imbalance_s",
    "frac_data", "frac_forward", "frac_backward", "frac_comm", "frac_exposed_comm", "frac_optimizer",
    "frac_other", "frac_imbalance",
    "compute_comm_ratio", "comm_calls_per_step", "comm_bytes_per_step", "rank_skew",
    "peak_rss_mb", "peak_rss_mb_per_rank", "cuda_max_allocated_mb",
    "train_loss_final", "train_acc_final", "train_loss_last10_mean", "train_acc_last10_mean",
    "test_loss", "test_acc", "param_norm",
    "profiled_step_s", "profile_overhead", "profile_wall_s",  # null unless profile_steps > 0
)  # fmt: skip


def test_step_columns_are_the_contract():
    assert run_output.STEP_COLUMNS == (
        "step", "epoch", "rank", "timed", "data_s", "forward_s", "backward_s", "comm_s", "exposed_comm_s",
        "optimizer_s", "other_s", "total_s", "loss", "samples", "comm_calls", "comm_bytes",
    )  # fmt: skip


def test_final_train_loss_is_the_last_step_and_the_tail_mean_is_named_for_its_10_steps():
    from ddpbench.run import cell, loop

    def rank(steps):  # a rank's payload after these (loss, correct, samples) steps
        result = loop.LoopResult()
        result.last.extend(steps)
        return {"train": cell.train_sums(result)}

    # 12 steps: the deque keeps the last 10. Rank 0: loss 12 - i, 4 samples, 1 correct;
    # rank 1 (half the samples): loss 20 at every step, 2 samples, 2 correct.
    a = rank([(12.0 - i, 1, 4) for i in range(12)])
    b = rank([(20.0, 2, 2)] * 12)
    got = cell.train_outcomes([a, b])
    # Last step: (1 x 4 + 20 x 2) / 6 = 44 / 6; accuracy (1 + 2) / 6.
    assert got["train_loss_final"] == pytest.approx(44 / 6) and got["train_acc_final"] == pytest.approx(0.5)
    # Last 10 steps: rank 0's losses 10..1 sum to 55, x 4 = 220; rank 1: 20 x 2 x 10 = 400; 60 samples.
    assert got["train_loss_last10_mean"] == pytest.approx(620 / 60) and got["train_acc_last10_mean"] == pytest.approx(30 / 60)
    # A run shorter than the tail: every step it ran; and the k in the name is TAIL_STEPS.
    assert loop.LoopResult().tail(1) == (0, 0, 0) and rank([(3.0, 1, 2)])["train"]["last10_mean"] == (6.0, 1.0, 2)
    assert f"train_loss_last{loop.TAIL_STEPS}_mean" in run_output.METRIC_KEYS


def test_summary_has_every_key_of_the_contract():
    s = run_output.make_summary("ok", "", {"seed": 0}, 4, 2, {"host": "h"}, {"samples_per_s": 12.5}, {"k": 1})
    assert list(s) == ["schema", "status", "reason", "params", "world_size", "nodes", *SUMMARY_METRICS, "extra", "env"]
    assert (s["schema"], s["status"], s["reason"], s["params"]) == (1, "ok", "", {"seed": 0})
    assert (s["world_size"], s["nodes"], s["env"], s["extra"]) == (4, 2, {"host": "h"}, {"k": 1})


def test_summary_keeps_finite_metrics_and_nulls_missing_nan_and_inf():
    given = {"global_batch": 64, "samples_per_s": 12.5, "step_time_median_s": math.nan,
             "step_time_p95_s": math.inf, "rank_skew": -math.inf, "not_a_metric": 1.0}  # fmt: skip
    s = run_output.make_summary("ok", "", {}, 2, 1, {}, given)
    assert (s["global_batch"], s["samples_per_s"]) == (64, 12.5)
    assert s["step_time_median_s"] is s["step_time_p95_s"] is s["rank_skew"] is s["epoch_time_s"] is None
    assert "not_a_metric" not in s


def test_summary_of_a_failed_run_has_every_metric_null():
    s = run_output.make_summary("failed", "boom", {}, 2, 1, {})
    assert all(s[k] is None for k in SUMMARY_METRICS)
    assert s["extra"] == {}


def test_summary_extra_is_cleaned_of_nan_and_inf():
    s = run_output.make_summary("ok", "", {}, 2, 1, {}, None, {"a": math.nan, "b": 2.5, "c": "x", "d": math.inf})
    assert s["extra"] == {"a": None, "b": 2.5, "c": "x", "d": None}


def test_summary_round_trips_through_strict_json():
    s = run_output.make_summary("ok", "", {"seed": 3}, 2, 1, {"host": "h"}, {"samples_per_s": 0.1, "frac_data": math.nan})
    back = json.loads(json.dumps(s, allow_nan=False))
    assert back == s and back["samples_per_s"] == 0.1 and back["frac_data"] is None


def test_write_json_replaces_the_file_atomically(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")
    run_output.write_json(path, {"a": 1.5, "b": [None]})
    assert json.loads(path.read_text()) == {"a": 1.5, "b": [None]}
    assert path.read_text() == '{\n "a": 1.5,\n "b": [\n  null\n ]\n}\n'  # indented, newline-terminated
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("losses", "health", "said"),
    [
        ([2.3, 2.2, 1.9, 1.5, 1.2, 0.9, 0.8, 0.7], "ok", ""),
        ([2.3, 2.1, float("nan"), 2.0], "diverged", "became nan at step 2"),
        ([2.3, 2.2, float("inf")], "diverged", "became inf"),
        ([2.3, 3.0, 4.5, 6.0, 9.0, 12.0, 15.0, 18.0], "diverged", "rose from 2.3"),
        ([2.27, 33.35, 75.91, 2.7, 2.89, 3.11, 2.7, 2.7, 2.5, 2.4], "unstable", "spiked to 75.9 at step 2"),
        ([], "unknown", "no losses"),
    ],
    ids=["learns", "nan", "inf", "rises", "spikes", "none"],
)
def test_training_health_marks_a_run_that_does_not_learn(losses, health, said):
    got, reason = run_output.training_health(losses)
    assert got == health and said in reason


def test_timeline_spans_partition_the_launcher_wall_and_fixed_cost_is_the_rest_of_it():
    # Marks 0, 1, 3, 6, ... (the n-th span lasts n + 1 s): the spans add up to the last mark.
    marks, t = {}, 100.0
    for i, name in enumerate(run_output.TIMELINE_MARKS):
        marks[name] = t
        t += i + 1
    spans = run_output.timeline_spans(marks)
    assert list(spans) == list(run_output.TIMELINE_SPANS)
    assert list(spans.values()) == [float(i + 1) for i in range(len(spans))]
    wall = marks["launcher_exit"] - marks["launcher_start"]  # 1 + 2 + ... + 11 = 66
    assert wall == sum(spans.values()) == 66.0
    # fixed cost: the launcher's wall minus the timed wall (not the timed_steps span)
    assert run_output.fixed_cost_s(marks, 2.5) == 63.5
    assert run_output.fixed_cost_s(marks, None) == 66.0  # no timed steps: all of it is fixed cost
    assert run_output.fixed_cost_s({"launcher_start": 1.0}, 2.5) is None  # no launcher: unknown


def test_with_timeline_merges_marks_in_their_order_and_leaves_unknown_spans_null():
    summary = {"status": "ok", "timed_wall_s": 0.5, "timeline": {"ranks_started": 2.0, "imports_done": 3.0}}
    out = run_output.with_timeline(summary, {"launcher_exit": 10.0, "launcher_start": 1.0, "warmup_done": None})
    assert list(out["timeline"]) == ["launcher_start", "ranks_started", "imports_done", "launcher_exit"]
    assert out["timeline_s"]["imports"] == 1.0 and out["timeline_s"]["torchrun"] is None
    assert out["fixed_cost_s"] == 8.5  # (10 - 1) - 0.5
    assert summary["timeline"] == {"ranks_started": 2.0, "imports_done": 3.0}  # not modified
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize(
    ("losses", "health"),
    [
        ([1.0, 1.4, 1.4, 1.4], "ok"),  # ended 1.4x its start: under DIVERGED_FACTOR 1.5
        ([1.0, 1.5, 1.5, 1.5], "ok"),  # exactly 1.5x: not above it
        ([1.0, 2.85, 0.9, 0.8], "ok"),  # spiked 2.85x: under UNSTABLE_FACTOR 3
        ([1.0, 3.0, 0.9, 0.8], "ok"),  # exactly 3x: not above it
        ([1.0, 3.5, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5], "unstable"),  # a start of 1 counts
        ([0.0, 0.5, 0.5, 0.5], "ok"),  # a start of 0 gives no factor to judge by
        ([0.0, 5.0, 0.0, 0.0], "ok"),
        ([1.0, 1.0, 1.7], "diverged"),  # under 4 steps the end is the last step alone
        # 24 steps: the end is the mean of the last 5 (1.6x), not of 4 or 6 (1.5x, 1.42x), nor their median
        ([1.0] * 18 + [0.5, 2.0, 1.5, 1.5, 1.5, 1.5], "diverged"),
        ([1.0, None, "", 1.7], "diverged"),  # missing losses are skipped, not read as numbers
    ],
)  # fmt: skip
def test_training_health_at_its_thresholds_and_its_end_window(losses, health):
    assert run_output.training_health(losses)[0] == health


def test_the_launchers_own_summary_keeps_its_thread_count_and_a_failure_only_where_given():
    from ddpbench.core.params import CellParams

    params = CellParams(strategy="ddp", threads_per_rank=2)
    plain = run_output.failure_summary(params, 2, 1, "failed", "why")
    assert "failure" not in plain and plain["env"]["threads_per_rank"] == 2
    given = run_output.failure_summary(params, 2, 1, "failed", "why", threads_per_rank=3, failure={"kind": "oom"})
    assert given["failure"] == {"kind": "oom"} and given["env"]["threads_per_rank"] == 3
    assert run_output.failure_summary(CellParams(strategy="ddp"), 2, 1, "failed", "why")["env"]["threads_per_rank"] is None
