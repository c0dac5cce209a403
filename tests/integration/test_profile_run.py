"""A profiled world-size-2 run through the launcher (cell parameter profile_steps, issue 13):
communication shows as its own operators, the profiler's overhead is in the summary, the
profiled steps stay out of the timed figures, and aggregate gathers the tidy profile.csv."""

import csv
import json
import subprocess
import sys

import pytest

from ddpbench.results import aggregate
from ddpbench.run import profiling

FLAGS = [
    "--synthetic-shape", "mnist", "--dataset-size", "64", "--test-size", "16", "--batch-size", "8",
    "--max-steps", "6", "--warmup-steps", "1", "--strategy", "allreduce", "--profile-steps", "2",
]  # fmt: skip


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_profiled_allreduce_run_at_world_size_2(tmp_path):
    out = tmp_path / "runs" / "strategy~allreduce" / "repeat~0"
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"]
    assert summary["params"]["profile_steps"] == 2

    # The profiled steps are not among the run's steps: 6 steps, the first 2 untimed.
    assert summary["total_steps"] == summary["extra"]["steps_run"] == 6 and summary["timed_steps"] == 4
    for rank in range(2):
        steps = rows(out / f"steps_rank{rank}.csv")
        assert [int(r["step"]) for r in steps] == list(range(6))
        assert sum(int(r["timed"]) for r in steps) == 4

    # The profiler's overhead, measured against the timed steps.
    assert summary["profiled_step_s"] > 0 and summary["profile_wall_s"] > 0
    assert summary["profile_overhead"] == pytest.approx(summary["profiled_step_s"] / summary["step_time_median_s"] - 1)

    table = rows(out / "profile.csv")
    assert tuple(table[0]) == profiling.PROFILE_COLUMNS
    for rank in ("0", "1"):
        mine = [r for r in table if r["rank"] == rank]
        assert {r["activity"] for r in mine} == {"cpu"} and mine[-1]["op"] == "other"
        assert len(mine) <= profiling.TOP_K + 1
        assert sum(float(r["share"]) for r in mine) == pytest.approx(1.0)
        comm = {r["op"] for r in mine if r["comm"] == "1"}
        assert "gloo:all_reduce" in comm, [r["op"] for r in mine]  # allreduce's collectives, their own row
        (gloo,) = [r for r in mine if r["op"] == "gloo:all_reduce"]
        assert float(gloo["calls"]) == 6  # one all_reduce per parameter tensor of the mlp, per step

    # aggregate: the tidy table beside runs.csv, the new summary fields as runs.csv columns.
    tables = tmp_path / "aggregate"
    result = aggregate.aggregate([out / "summary.json"], tables / "runs.csv", tables / "steps.csv")
    assert result == (1, 12, len(table))
    tidy = rows(tables / "profile.csv")
    assert tuple(tidy[0]) == (*aggregate.STEP_KEYS, *profiling.PROFILE_COLUMNS)
    assert {r["strategy"] for r in tidy} == {"allreduce"} and {r["repeat"] for r in tidy} == {"0"}
    (run,) = rows(tables / "runs.csv")
    assert run["profile_steps"] == "2" and float(run["profile_overhead"]) == summary["profile_overhead"]
    assert float(run["profiled_step_s"]) == summary["profiled_step_s"]
