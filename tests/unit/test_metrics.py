import json
import math

import numpy as np
import pytest

from ddpbench import metrics


def rec(step, total, timed=1, comm_calls=1, comm_bytes=100, samples=4, **phases):
    r = {"step": step, "timed": timed, "total_s": total, "samples": samples, "comm_calls": comm_calls,
         "comm_bytes": comm_bytes}  # fmt: skip
    for p in metrics.SUMMARY_PHASES:
        r[f"{p}_s"] = phases.get(p, 0.0)
    return r


def balanced(step, total, comm_calls=1, **phases):
    """A rank's record whose phases add up to `total`, the rest charged to exposed comm."""
    exposed = total - sum(phases.values())
    return rec(step, total, comm_calls=comm_calls, exposed_comm=exposed, comm=exposed, **phases)


def test_interval_union():
    assert metrics.interval_union([]) == 0
    assert metrics.interval_union([(0, 1), (0.5, 2), (3, 4), (3.2, 3.5)]) == pytest.approx(3.0)


@pytest.mark.parametrize("q", [0, 50, 95, 100])
def test_percentile_matches_numpy(q):
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    assert metrics.percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_step_statistics_take_the_pacing_rank_and_skip_untimed_steps():
    r0 = [rec(0, 9.0, timed=0), balanced(1, 1.0, forward=0.5), balanced(2, 2.0, forward=1.5)]
    r1 = [rec(0, 9.0, timed=0), balanced(1, 0.9, forward=0.3), balanced(2, 4.0, forward=0.2)]
    r1[1]["comm_bytes"] = 300
    s = metrics.step_statistics([r0, r1], timed_wall_s=5.0, dataset_size=10)
    assert s["total_steps"] == 3 and s["timed_steps"] == 2
    assert s["step_time_median_s"] == pytest.approx(2.5)  # max over ranks: 1.0 and 4.0
    assert s["step_time_mean_s"] == pytest.approx(2.5)
    # Pacing rank = most computation: rank 0 in both steps (0.5 > 0.3, 1.5 > 0.2).
    assert s["phase_forward_s"] == pytest.approx(2.0)
    assert s["phase_exposed_comm_s"] == pytest.approx(0.5 + 0.5)
    # Rank 1's longer total in step 2 is a gap the pacing rank's timeline does not show.
    assert s["phase_other_s"] == pytest.approx(4.0 - 2.0)
    assert s["phase_total_s"] == pytest.approx(5.0)
    assert s["frac_forward"] == pytest.approx(2.0 / 5.0)
    assert s["samples_per_s"] == pytest.approx(16 / 5.0)
    assert s["epoch_time_s"] == pytest.approx(10 / (16 / 5.0))  # fixed work: dataset / throughput
    assert s["comm_bytes_per_step"] == pytest.approx(200.0)  # busiest rank per step: 300, 100
    assert s["phase_imbalance_s"] == pytest.approx(0.2 + 1.3)
    assert s["rank_skew"] == pytest.approx(np.median([0.2 / 0.5, 1.3 / 1.5]))
    assert s["compute_comm_ratio"] == pytest.approx(2.0 / 1.0)


def test_phases_partition_the_step_under_rank_imbalance():
    """Rank 0 slowed in forward, blocking all-reduce: rank 1 waits inside its comm phase.
    The old per-phase max over ranks summed to ~1.4 of the step; the pacing rank's
    timeline sums to exactly 1, and the waiting shows as imbalance and skew, not comm."""
    slow = [balanced(i, 0.070, data=0.001, forward=0.040, backward=0.004, optimizer=0.001) for i in range(10)]
    fast = [balanced(i, 0.070, data=0.001, forward=0.004, backward=0.004, optimizer=0.001) for i in range(10)]
    s = metrics.step_statistics([slow, fast], timed_wall_s=0.7, dataset_size=400)
    parts = ("data", "forward", "backward", "exposed_comm", "optimizer", "other")
    assert sum(s[f"frac_{p}"] for p in parts) == pytest.approx(1.0)
    assert s["frac_exposed_comm"] == pytest.approx(0.024 / 0.070)  # the slow rank's own comm
    assert s["compute_comm_ratio"] == pytest.approx(0.045 / 0.024)
    assert s["frac_imbalance"] == pytest.approx(0.036 / 0.070)
    assert s["rank_skew"] == pytest.approx(0.036 / 0.046)


def test_weak_scaling_epoch_time_covers_the_whole_dataset():
    """Dataset 1000, per-rank batch 300, p = 2: 600 samples per step. Steps-per-epoch x
    step time would cover 600 of 1000 samples; fixed work covers all 1000."""
    ranks = [[balanced(i, 1.0, forward=0.5, samples=300) for i in range(4)] for _ in range(2)]
    s = metrics.step_statistics(ranks, timed_wall_s=4.0, dataset_size=1000)
    assert s["samples_per_s"] == pytest.approx(600.0)
    assert s["epoch_time_s"] * s["samples_per_s"] == pytest.approx(1000)


@pytest.mark.parametrize(("law", "p", "factor"), [("allreduce", 4, 1.5), ("gather_scatter", 32, 31),
                                                  ("allreduce_allgather", 2, 1.5), ("point_to_point", 8, 1),
                                                  ("none", 2, 0)])  # fmt: skip
def test_comm_volume_laws(law, p, factor):
    assert metrics.comm_volume_factor(law, p) == pytest.approx(factor)
    assert np.allclose(metrics.comm_volume_factor(law, np.array([p, p])), factor)


def test_unknown_comm_volume_law_is_named():
    with pytest.raises(ValueError, match="'ring'"):
        metrics.comm_volume_factor("ring", 2)


def test_no_communication_has_no_ratio_and_no_timed_steps_no_figures():
    s = metrics.step_statistics([[rec(0, 1.0, timed=0), rec(1, 1.0, comm_calls=0, forward=1.0)]], 1.0, 2)
    assert s["compute_comm_ratio"] is None
    s = metrics.step_statistics([[rec(0, 1.0, timed=0)]], None, 2)
    assert s == {"total_steps": 1, "timed_steps": 0}


def test_summary_has_every_key_and_valid_json():
    s = metrics.make_summary("failed", "boom", {"seed": 0}, 2, 1, {"host": "h"}, {"step_time_median_s": math.nan})
    assert all(k in s for k in metrics.METRIC_KEYS) and s["step_time_median_s"] is None
    json.loads(json.dumps(s, allow_nan=False))


class FakeClock:
    """Every stamp one second after the previous; counts the waits for the device."""

    def __init__(self):
        self.t, self.waits = 0.0, 0

    def stamp(self):
        self.t += 1.0
        return self.t

    def wait(self, stamp):
        self.waits += 1

    def elapsed(self, a, b):
        return b - a


def test_step_timer_laps_add_up():
    timer = metrics.StepTimer(FakeClock())
    timer.begin()
    for phase in ("data", "forward", "comm", "comm"):
        timer.lap(phase)
    timer.end()
    assert timer.phases["comm"] == 2.0 and timer.total == 4.0 == sum(timer.phases.values())
    assert timer.clock.waits == 1
    timer.begin()  # a new step starts from zero
    timer.lap("data")
    timer.end()
    assert timer.phases["data"] == 1.0 and timer.phases["comm"] == 0.0 and timer.total == 1.0
    off = metrics.StepTimer(FakeClock(), enabled=False)
    off.begin()
    off.lap("data")
    off.end()
    assert off.phases["data"] == 0.0 and off.clock.waits == 0


class FakeEvent:
    """torch.cuda.Event without a GPU: records the host time; counts synchronisations."""

    syncs = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.t = None

    def record(self):
        import time

        self.t = time.perf_counter()

    def synchronize(self):
        FakeEvent.syncs += 1

    def elapsed_time(self, other):  # milliseconds, as torch's
        return (other.t - self.t) * 1000.0


def test_cuda_timing_uses_events_and_one_wait_per_step(monkeypatch):
    """On CUDA the phases come from events and the step synchronises once, at its end:
    no device-wide synchronize at phase boundaries (which would remove the CPU-GPU
    overlap the loop is meant to measure)."""
    import torch

    def forbidden():
        raise AssertionError("torch.cuda.synchronize() inside a timed step")

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", forbidden)
    FakeEvent.syncs = 0
    clock = metrics.Clock("cuda")
    timer, meter = metrics.StepTimer(clock), metrics.CommMeter()
    for _ in range(3):
        timer.begin()
        for phase in ("data", "forward", "backward", "comm", "optimizer", "comm"):
            timer.lap(phase)
        a, b = clock.stamp(), clock.stamp()
        meter.defer(lambda c, a=a, b=b: meter.blocking(c.elapsed(a, b), "optimizer"))
        timer.end()
        meter.resolve(clock)
        assert sum(timer.phases.values()) == pytest.approx(timer.total)
        assert timer.wall_end >= timer.wall_start
        assert meter.hidden["optimizer"][0] >= 0
        meter.reset()
    assert FakeEvent.syncs == 3


def test_comm_meter_accumulates_per_phase_and_resets():
    m = metrics.CommMeter()
    m.add(2, 10)
    m.overlapped(1.0, 0.5)
    m.overlapped(1.0, 0.25)
    m.blocking(0.125, "optimizer")
    assert (m.calls, m.bytes) == (2, 10)
    assert m.hidden == {"backward": [2.0, 0.75], "optimizer": [0.125, 0.125]}
    assert m.hidden_comm_s == pytest.approx(2.125)
    m.reset()
    assert (m.calls, m.bytes, m.hidden) == (0, 0, {})


def test_peak_rss_is_positive():
    assert metrics.peak_rss_mb() > 1


def test_step_timer_lap_split_charges_parts_and_the_rest():
    timer = metrics.StepTimer(FakeClock())
    timer.begin()
    timer.lap("data")
    timer.lap_split({"forward": 0.25, "backward": 0.5}, rest="comm")
    timer.end()
    lap = timer.total - timer.phases["data"]
    assert timer.phases["forward"] == 0.25 and timer.phases["backward"] == 0.5
    assert timer.phases["comm"] == pytest.approx(lap - 0.75)
    assert sum(timer.phases.values()) == pytest.approx(timer.total)
