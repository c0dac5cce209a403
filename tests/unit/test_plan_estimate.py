"""The plan's time estimate learns each run's fixed cost and step pace from the summaries this
host wrote (this results folder first, then the ones beside it), says where its figure came from,
and states the load it assumed or observed (issue 58, item 4)."""

import json
import random
import re
import socket
import time

import pytest

from ddpbench.core import run_output
from ddpbench.core.params import CellParams
from ddpbench.plan import catalog, estimate

pytestmark = pytest.mark.unit

HOST = "bench-host"
QUIET = (0.0, "")
GPT = dict(model="gpt_tiny", dataset="synthetic_tokens", threads_per_rank=1, test_size=96, warmup_steps=2)


def cell(**changes):
    return {**CellParams().as_dict(), "world_size": 2, "strategy": "ddp", "min_timed_s": 0.0, **changes}


def flops_s(p, samples):
    """Seconds for `samples` samples a rank at 24 GFLOP/s a thread, one thread a rank on >= 2 cores."""
    shape = p["synthetic_shape"] if p["dataset"] == "synthetic" else p["dataset"]
    return samples * catalog.forward_flops(p["model"], shape) / estimate.CPU_FORWARD_FLOPS_PER_S


def true_wall(p, launch, pace):
    """What a run of cell `p` costs on a host whose runs pay `launch` s and run `pace` x their FLOPs."""
    per_rank = p["batch_size"] / p["world_size"]
    untimed = (1 + p["warmup_steps"]) * per_rank + p["test_size"] / 3
    return launch + pace * flops_s(p, untimed + estimate.timed_steps(p) * per_rank)


def write_run(folder, name, p, *, launch=5.0, pace=1.7, host=HOST, other=0.0, status="ok", env_vars=None):
    """A run's summary.json in the format the launcher publishes (run_output.with_timeline)."""
    per_rank, timed_steps = p["batch_size"] / p["world_size"], estimate.timed_steps(p)
    untimed_steps = 1 + p["warmup_steps"]
    timed_s = pace * flops_s(p, timed_steps * per_rank)
    untimed_s = pace * flops_s(p, untimed_steps * per_rank + p["test_size"] / 3)
    start = 1.8e9
    marks = {"launcher_start": start, "warmup_done": start + launch + untimed_s * 0.9,
             "timed_steps_done": start + launch + untimed_s * 0.9 + timed_s, "launcher_exit": start + launch + untimed_s + timed_s}  # fmt: skip
    summary = {
        "schema": 1, "status": status, "reason": "", "params": p, "world_size": p["world_size"], "nodes": 1,
        "global_batch": p["batch_size"], "per_rank_batch": per_rank, "total_steps": timed_steps + untimed_steps,
        "timed_steps": timed_steps, "timed_wall_s": timed_s,
        "env": {"host": host, "cores": 2, "threads_per_rank": 1, "other_cpu_frac": other, "env_vars": env_vars or {}},
    }  # fmt: skip
    out = folder / "runs" / name
    out.mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps(run_output.with_timeline(summary, marks)))


def per_run_s(line):
    return float(re.search(r"\((\d+) s a run", line).group(1))


def total_s(line):
    n, unit = re.search(r"about (\d+(?:\.\d+)?) (s|min|h) ", line).groups()
    return float(n) * {"s": 1, "min": 60, "h": 3600}[unit]


def test_a_new_study_learns_fixed_cost_and_pace_from_a_results_folder_beside_it(tmp_path):
    """The newcomer's case: 39 gpt_tiny runs at p=2 after an earlier gpt_tiny study in another folder
    of this host. Within 15 % of the runs' true wall (their launch cost and pace drawn with +-10 %
    noise); the old estimate said 4 min for a study that took 14."""
    rng = random.Random(58)
    earlier, mine = tmp_path / "results" / "lm_first", tmp_path / "results" / "lm"
    for i in range(8):
        p = cell(**GPT, batch_size=16, dataset_size=1024)
        write_run(earlier, f"r{i}", p, launch=11.0 * rng.uniform(0.9, 1.1), pace=1.7 * rng.uniform(0.9, 1.1))
    new = cell(**GPT, batch_size=32, dataset_size=2048)
    line = estimate.time_estimate([new], 13, 39, mine, host=HOST, now=QUIET)
    truth = 39 * true_wall(new, 11.0, 1.7)
    assert abs(total_s(line) - truth) <= 0.15 * truth, (line, truth)
    assert "learned from 8 run(s) of this host (8 in 1 other results folder(s)" in line and "lm_first" in line
    assert "at the pace measured for their model" in line, line


def test_this_results_folder_comes_first_and_reading_is_bounded(tmp_path):
    results, beside = tmp_path / "results" / "mine", tmp_path / "results" / "old"
    (tmp_path / "results" / "notes").mkdir(parents=True)  # no runs/: not a results folder
    for i in range(3):
        write_run(results, f"r{i}", cell(**GPT, batch_size=16, dataset_size=512), launch=4.0)
        write_run(beside, f"r{i}", cell(**GPT, batch_size=16, dataset_size=512), launch=20.0)
    assert estimate.history_folders(results) == [results, beside]
    assert len(estimate.measured_runs(estimate.history_folders(results), HOST, limit=4)) == 4
    firsts = estimate.measured_runs(estimate.history_folders(results), HOST, limit=3)
    assert {r.folder for r in firsts} == {str(results)}  # the limit reached in this folder: none of the old
    line = estimate.time_estimate([cell(**GPT, batch_size=16, dataset_size=512)], 1, 1, results, host=HOST, now=QUIET)
    assert "3 in this results folder; 3 in 1 other results folder(s)" in line, line


def test_a_run_split_into_launch_cost_and_pace(tmp_path):
    p = cell(**GPT, batch_size=16, dataset_size=1024)
    write_run(tmp_path / "r", "a", p, launch=5.0, pace=2.0)
    (run,) = estimate.measured_runs([tmp_path / "r"], HOST)
    assert run.pace == pytest.approx(2.0) and run.launch_s == pytest.approx(5.0)
    assert run.fixed_s == pytest.approx(true_wall(p, 5.0, 2.0) - run.timed_s) and not run.busy


def test_runs_of_another_host_failed_or_slowed_on_purpose_are_ignored(tmp_path):
    results, beside = tmp_path / "results" / "mine", tmp_path / "results" / "other_host"
    p = cell(**GPT, batch_size=16, dataset_size=512)
    write_run(beside, "a", p, host="someone-else", launch=30.0)
    write_run(results, "b", p, status="failed", launch=30.0)
    write_run(results, "c", p, env_vars={"DDPBENCH_INJECT": "slow:0:10%"}, launch=30.0)
    line = estimate.time_estimate([p], 3, 3, results, host=HOST, now=QUIET)
    assert "a default, no run of this host in" in line and "learned" not in line, line
    assert estimate.measured_runs(estimate.history_folders(results), "someone-else")  # the same folder, its own host


def test_the_host_is_this_machines_name_by_default(tmp_path):
    p = cell(**GPT, batch_size=16, dataset_size=512)
    write_run(tmp_path / "results", "a", p, host=socket.gethostname())
    assert "learned from 1 run(s)" in estimate.time_estimate([p], 1, 1, tmp_path / "results", now=QUIET)


def test_with_no_history_the_default_is_used_and_named(tmp_path):
    p = cell(**GPT, batch_size=32, dataset_size=2048)
    line = estimate.time_estimate([p], 3, 3, tmp_path / "results", host=HOST, now=QUIET)
    expected = estimate.FIXED_RUN_S + estimate.compute_s(p, cores=2)  # one thread a rank: cores do not matter
    assert per_run_s(line) == round(expected), line
    assert f"a default, no run of this host in {tmp_path / 'results'} or the results folders beside it yet" in line
    assert f"{estimate.FIXED_RUN_S:g} s fixed + the steps" in line and "busy" not in line
    # the refusal of a budget says when its estimate is this default (design.first_round_problem)
    assert not estimate.run_estimate([p], tmp_path / "results", host=HOST, now=QUIET).learned
    write_run(tmp_path / "results", "a", p, host=HOST)
    assert estimate.run_estimate([p], tmp_path / "results", host=HOST, now=QUIET).learned


def test_a_cell_that_cannot_start_warm_costs_a_cold_start_by_default(tmp_path):
    """CPU cells on one node start warm (run.warm); a CUDA cell or one over a link starts cold."""
    p = cell(**GPT, batch_size=32, dataset_size=2048)
    assert estimate.default_run_s(p, 2)[0] == estimate.FIXED_RUN_S < estimate.COLD_RUN_S
    assert estimate.default_run_s({**p, "device": "cuda"}, 2)[0] == estimate.COLD_RUN_S
    assert estimate.default_run_s({**p, "link": "1gbit"}, 2)[0] == estimate.COLD_RUN_S + estimate.LAB_RUN_S
    line = estimate.time_estimate([p, {**p, "device": "cuda"}], 3, 6, tmp_path / "results", host=HOST, now=QUIET)
    assert f"{estimate.FIXED_RUN_S:g} s (warm CPU cells) to {estimate.COLD_RUN_S:g} s fixed" in line, line


def test_a_cell_the_launcher_skips_costs_a_skip_not_a_run(tmp_path):
    ddp_alone = cell(**GPT, batch_size=32, dataset_size=2048, world_size=1)
    line = estimate.time_estimate([ddp_alone], 1, 10, tmp_path / "results", host=HOST, now=QUIET)
    assert per_run_s(line) == round(estimate.SKIPPED_RUN_S) and "1 cell(s) the launcher skips" in line and "(a default)" in line
    for i, wall in enumerate((3.0, 4.0, 5.0)):  # a skip measured here: its wall, not a run's
        write_run(tmp_path / "results", f"s{i}", ddp_alone, status="skipped", launch=wall, pace=0.0)
    line = estimate.time_estimate([ddp_alone] * 2, 1, 10, tmp_path / "results", host=HOST, now=QUIET)
    assert "(4 s a run" in line and "2 cell(s) the launcher skips at their world size, 4.0 s each (the median of 3 measured)" in line


def test_another_models_cells_take_the_flops_default_pace_and_the_measured_launch_cost(tmp_path):
    results = tmp_path / "results"
    for i in range(3):
        write_run(results, f"r{i}", cell(model="mlp", dataset="synthetic", batch_size=8, dataset_size=256,
                                         threads_per_rank=1, test_size=32), launch=7.0, pace=27.0)  # fmt: skip
    gpt = cell(**GPT, batch_size=32, dataset_size=2048)
    line = estimate.time_estimate([gpt], 1, 1, results, host=HOST, now=QUIET)
    assert per_run_s(line) == round(true_wall(gpt, 7.0, 1.0)), line  # not the mlp's 27x: its per-step overhead
    assert "at the FLOPs default, 24 GFLOP/s a CPU thread" in line


def test_a_busy_history_is_stated_with_the_slowdown_it_assumed(tmp_path):
    p = cell(**GPT, batch_size=16, dataset_size=1024)
    for i in range(3):
        write_run(tmp_path / "results", f"r{i}", p, launch=13.4, other=0.4)
    line = estimate.time_estimate([p], 1, 1, tmp_path / "results", host=HOST, now=QUIET)
    assert "all 3 run(s) learned from were measured on a busy machine (other processes took a median 40 % of the CPU)" in line
    assert "about 1.4x slower than a quiet machine" in line
    assert per_run_s(line) == round(true_wall(p, 13.4, 1.7)), line  # kept as measured: the load may last


def test_busy_runs_are_left_out_beside_quiet_ones_with_the_slowdown_observed(tmp_path):
    p = cell(**GPT, batch_size=16, dataset_size=1024)
    for i in range(3):
        write_run(tmp_path / "results", f"q{i}", p, launch=4.0, pace=1.5)
        write_run(tmp_path / "results", f"b{i}", p, launch=12.0, pace=3.0, other=0.5)
    line = estimate.time_estimate([p], 1, 1, tmp_path / "results", host=HOST, now=QUIET)
    ratio = true_wall(p, 12.0, 3.0) / true_wall(p, 4.0, 1.5)
    assert f"3 run(s) measured on a busy machine left out (other processes took a median 50 % of the CPU; " \
           f"they took {ratio:.1f}x the wall of the quiet runs of their cells)" in line, line  # fmt: skip
    assert per_run_s(line) == round(true_wall(p, 4.0, 1.5)) and "learned from 3 run(s)" in line


def test_a_busy_machine_now_slows_a_quiet_history_and_says_by_how_much(tmp_path):
    p = cell(**GPT, batch_size=16, dataset_size=1024)
    write_run(tmp_path / "results", "q", p, launch=4.0)
    now = (0.5, "other processes take 50 % of the CPU, 1-min load 1.0 on 2 cores")
    line = estimate.time_estimate([p], 1, 1, tmp_path / "results", host=HOST, now=now)
    assert per_run_s(line) == round(1.5 * true_wall(p, 4.0, 1.7)), line
    assert "the machine is busy now (other processes take 50 % of the CPU, 1-min load 1.0 on 2 cores): assumed 1.5x" in line
    default = estimate.time_estimate([p], 1, 1, tmp_path / "none", host=HOST, now=now, folders=[])
    assert "assumed 1.5x slower than the default" in default


def test_busy_now_needs_both_the_load_average_and_a_sample_to_say_busy(monkeypatch):
    readings = iter([100.0, 100.0 + 0.2 * 2 * 0.6])  # others busy 60 % of 2 cores over the sample
    monkeypatch.setattr(estimate.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(estimate.sysinfo, "machine_busy_s", lambda: next(readings))
    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert estimate.busy_now(0.2) == (0.0, "")  # quiet load average: no sample taken
    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (1.8, 1.0, 0.5))
    # the sample runs from the plan's import (its snapshot) to now: taken here, it sleeps the rest
    monkeypatch.setattr(estimate, "_SNAPSHOT", estimate.snapshot())
    frac, said = estimate.busy_now(0.2)
    assert 0.4 < frac < 0.65 and "1-min load 1.8 on 2 cores" in said  # the sample, its wall slightly over 0.2 s
    readings = iter([100.0, 100.01])  # the average still counts a finished run; the sample says quiet
    monkeypatch.setattr(estimate, "_SNAPSHOT", estimate.snapshot())
    assert estimate.busy_now(0.2) == (0.0, "")
    # cores saturated: the share is capped at all of them (a 2x slowdown), whatever the load average
    readings = iter([100.0, 100.0 + 0.2 * 2 * 1.05])
    monkeypatch.setattr(estimate, "_SNAPSHOT", estimate.snapshot())
    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (7.3, 3.3, 2.8))
    assert estimate.busy_now(0.2)[0] == 1.0
    # a snapshot older than the sample: no sleep, the window since the import is the sample
    readings = iter([100.0, 100.0 + 0.5 * 2 * 0.6])
    monkeypatch.setattr(estimate, "_SNAPSHOT", (next(readings), time.process_time(), time.monotonic() - 0.5))
    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (1.8, 1.0, 0.5))
    started = time.monotonic()
    assert 0.5 < estimate.busy_now(0.2)[0] < 0.65 and time.monotonic() - started < 0.1
