import json
import math

import numpy as np
import pytest

from ddpbench import metrics


def rec(step, total, timed=1, comm_calls=1, comm_bytes=100, samples=4, **phases):
    r = {"step": step, "timed": timed, "total_s": total, "samples": samples, "comm_calls": comm_calls,
         "comm_bytes": comm_bytes}  # fmt: skip
    for p in metrics.SUMMARY_PHASES[:-1]:
        r[f"{p}_s"] = phases.get(p, 0.0)
    return r


def test_interval_union():
    assert metrics.interval_union([]) == 0
    assert metrics.interval_union([(0, 1), (0.5, 2), (3, 4), (3.2, 3.5)]) == pytest.approx(3.0)


@pytest.mark.parametrize("q", [0, 50, 95, 100])
def test_percentile_matches_numpy(q):
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    assert metrics.percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_step_statistics_take_the_slowest_rank_and_skip_untimed_steps():
    r0 = [rec(0, 9.0, timed=0), rec(1, 1.0, comm=0.2, exposed_comm=0.2, forward=0.5), rec(2, 2.0, comm=0.5)]
    r1 = [rec(0, 9.0, timed=0), rec(1, 0.5, comm=0.1, forward=0.3, comm_bytes=300), rec(2, 4.0, comm=0.4)]
    s = metrics.step_statistics([r0, r1], timed_wall_s=5.0, steps_per_epoch=10)
    assert s["total_steps"] == 3 and s["timed_steps"] == 2
    assert s["step_time_median_s"] == pytest.approx(2.5)  # max over ranks: 1.0 and 4.0
    assert s["step_time_mean_s"] == pytest.approx(2.5)
    assert s["phase_total_s"] == pytest.approx(5.0) and s["phase_comm_s"] == pytest.approx(0.7)
    assert s["frac_forward"] == pytest.approx(0.5 / 5.0)
    assert s["samples_per_s"] == pytest.approx(16 / 5.0)
    assert s["epoch_time_s"] == pytest.approx(25.0)
    assert s["comm_bytes_per_step"] == pytest.approx(200.0)  # busiest rank per step: 300, 100
    assert s["rank_skew"] == pytest.approx(np.median([0.5, 0.5]))
    assert s["compute_comm_ratio"] == pytest.approx(0.5 / 0.2)


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
    def __init__(self):
        self.t = 0.0

    def now(self):
        self.t += 1.0
        return self.t


def test_step_timer_laps_add_up():
    timer = metrics.StepTimer(FakeClock())
    timer.begin()
    for phase in ("data", "forward", "comm", "comm"):
        timer.lap(phase)
    assert timer.phases["comm"] == 2.0 and timer.total == 4.0 == sum(timer.phases.values())
    off = metrics.StepTimer(FakeClock(), enabled=False)
    off.begin()
    off.lap("data")
    assert off.phases["data"] == 0.0


def test_comm_meter_resets():
    m = metrics.CommMeter()
    m.add(2, 10)
    m.overlapped(1.0, 0.5)
    assert (m.calls, m.bytes, m.overlapped_exposed_s) == (2, 10, 0.5)
    m.reset()
    assert (m.calls, m.bytes, m.overlapped_comm_s) == (0, 0, 0.0)


def test_peak_rss_is_positive():
    assert metrics.peak_rss_mb() > 1


def test_step_timer_lap_split_charges_parts_and_the_rest():
    timer = metrics.StepTimer(FakeClock())
    timer.begin()
    timer.lap("data")
    timer.lap_split({"forward": 0.25, "backward": 0.5}, rest="comm")
    lap = timer.total - timer.phases["data"]
    assert timer.phases["forward"] == 0.25 and timer.phases["backward"] == 0.5
    assert timer.phases["comm"] == pytest.approx(lap - 0.75)
    assert sum(timer.phases.values()) == pytest.approx(timer.total)
