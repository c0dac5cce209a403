"""ddpbench.run.profiling: the top-operator table from a real torch.profiler run, its summary
fields, and a profiled world-size-1 run (the world-size-2 run with communication:
tests/integration/test_profile_run.py)."""

import csv
import json

import pytest
import torch

from ddpbench.run import profiling, train
from ddpbench.core.params import CellParams


def profiled_tiny_model(steps=3):
    """A real profile of a tiny MLP's training steps (CPU), through profiling.profile."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))

    def run_steps(step_done):
        for _ in range(1 + steps):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step_done()
        return None

    averages, _ = profiling.profile("cpu", steps, run_steps)
    return averages


@pytest.fixture(scope="module")
def averages():
    return profiled_tiny_model()


def test_top_table_of_a_real_profile_keeps_k_rows_sorted_with_shares_summing_to_1(averages):
    ops = profiling.operator_times(averages, "cpu")
    names = [op for op, _, _ in ops]
    assert "aten::addmm" in names and len(ops) > 6  # the real operators of the steps
    assert not any(n.startswith(profiling.STEP_ANNOTATION) for n in names)
    for k in (3, 5, profiling.TOP_K):
        rows = profiling.top_table(ops, 3, step_s=1e-6, k=k)  # a step shorter than its operators
        assert len(rows) == min(k, len(ops)) + 1 and rows[-1]["op"] == profiling.OTHER
        times = [r["self_s_per_step"] for r in rows[:-1]]
        assert times == sorted(times, reverse=True) and all(t > 0 for t in times)
        assert sum(r["share"] for r in rows) == pytest.approx(1.0)
        assert all(0 <= r["share"] <= 1 for r in rows)
    # addmm runs twice a step (two Linear layers): calls are per profiled step
    (addmm,) = [r for r in profiling.top_table(ops, 3, 1e-6, k=len(ops)) if r["op"] == "aten::addmm"]
    assert addmm["calls"] == 2


def test_other_holds_the_time_in_no_operator_when_the_step_is_longer():
    ops = [("a", 2, 0.6), ("b", 1, 0.3), ("c", 4, 0.1), ("d", 1, 0.05)]  # seconds over 2 steps
    rows = profiling.top_table(ops, steps=2, step_s=1.0, k=2)
    assert [r["op"] for r in rows] == ["a", "b", "other"]
    assert [r["self_s_per_step"] for r in rows] == pytest.approx([0.3, 0.15, 0.55])
    assert [r["share"] for r in rows] == pytest.approx([0.3, 0.15, 0.55])
    assert rows[-1]["calls"] == 2.5 and [r["calls"] for r in rows[:2]] == [1, 0.5]
    # operators overlapping (more than the step): shares of their sum, other = the rest
    rows = profiling.top_table(ops, steps=1, step_s=0.5, k=2)
    assert [r["share"] for r in rows] == pytest.approx([0.6 / 1.05, 0.3 / 1.05, 0.15 / 1.05])


def test_communication_operators_are_marked_and_indexing_ones_are_not():
    for op in ("gloo:all_reduce", "c10d::allreduce_", "c10d::send", "c10d::recv_", "c10d::broadcast_",
               "nccl:all_reduce", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"):  # fmt: skip
        assert profiling.is_comm(op), op
    for op in ("aten::gather", "aten::scatter_add_", "aten::broadcast_to", "aten::addmm", "other"):
        assert not profiling.is_comm(op), op


def test_summary_fields_use_the_slowest_rank_and_the_timed_median():
    fields = profiling.summary_fields([[0.10, 0.30, 0.12], [0.11, 0.20, 0.13]], timed_median_s=0.1)
    assert fields["profiled_step_s"] == pytest.approx(0.13)  # median of the per-step maxima 0.11, 0.30, 0.13
    assert fields["profile_overhead"] == pytest.approx(0.3)
    assert profiling.summary_fields([[], []], 0.1) == {"profiled_step_s": None, "profile_overhead": None}


def test_a_profiled_single_run_keeps_its_timed_steps_and_model(tmp_path):
    """World size 1 in this process: the profiled steps are neither in steps_rank0.csv nor in
    the timed figures, and the model the run reports is the one its timed steps trained."""
    import os

    from ddpbench.core import sysinfo

    threads, saved = torch.get_num_threads(), {k: os.environ.get(k) for k in sysinfo.THREAD_POOL_VARS}
    try:
        kw = dict(strategy="single", synthetic_shape="mnist", dataset_size=64, test_size=16, batch_size=16,
                  max_steps=6, warmup_steps=1, min_timed_steps=5, min_timed_s=0)  # fmt: skip
        for name, steps in (("plain", 0), ("profiled", 3)):
            assert train.run(CellParams(**kw, profile_steps=steps), tmp_path / name, tmp_path / f"{name}.pt") == 0
    finally:
        torch.set_num_threads(threads)
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
    plain, prof = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("plain", "profiled"))
    assert prof["status"] == "ok", prof["reason"]
    assert prof["total_steps"] == plain["total_steps"] == 6 and prof["timed_steps"] == plain["timed_steps"] == 4
    assert len(list(csv.DictReader(open(tmp_path / "profiled" / "steps_rank0.csv")))) == 6
    assert prof["param_norm"] == plain["param_norm"] and prof["test_loss"] == plain["test_loss"]
    # the model saved afterwards is the timed run's: the profiled steps' updates are undone
    saved = {n: torch.load(tmp_path / f"{n}.pt") for n in ("plain", "profiled")}
    assert all(torch.equal(saved["plain"][k], saved["profiled"][k]) for k in saved["plain"])
    assert prof["profiled_step_s"] > 0 and prof["profile_overhead"] is not None and prof["profile_wall_s"] > 0
    assert plain["profiled_step_s"] is None and plain["profile_overhead"] is None
    assert not (tmp_path / "plain" / "profile.csv").exists()
    rows = list(csv.DictReader(open(tmp_path / "profiled" / "profile.csv")))
    assert tuple(rows[0]) == profiling.PROFILE_COLUMNS
    assert {r["rank"] for r in rows} == {"0"} and {r["activity"] for r in rows} == {"cpu"}
    assert rows[-1]["op"] == "other" and sum(float(r["share"]) for r in rows) == pytest.approx(1.0)
    assert not any(r["comm"] == "1" for r in rows)  # single sends nothing
