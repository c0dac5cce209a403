"""train.run without torchrun (world size 1): statuses that need no process group."""

import csv
import json

import pytest

from ddpbench.core import sysinfo
from ddpbench.run import loop, rank, train
from ddpbench.core.params import CellParams


@pytest.fixture(autouse=True)
def keep_threads():
    """train.run sets this process's thread count and thread-pool variables: restore them."""
    import os

    import torch

    threads, saved = torch.get_num_threads(), {k: os.environ.get(k) for k in sysinfo.THREAD_POOL_VARS}
    yield
    torch.set_num_threads(threads)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def run(tmp_path, **kw):
    assert train.run(CellParams(**kw), tmp_path) in (0, 1)
    return json.loads((tmp_path / "summary.json").read_text())


def test_cuda_without_gpus_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    s = run(tmp_path, device="cuda", strategy="single")
    assert s["status"] == "skipped" and "CUDA is not available" in s["reason"]
    assert s["params"]["device"] == "cuda" and s["env"]["host"]


@pytest.mark.parametrize("name", ["gather_scatter", "ring_allreduce", "pipeline", "allreduce"])
def test_gloo_on_cuda_skips_point_to_point_strategies_and_lets_ranks_share_a_gpu(monkeypatch, name):
    """gloo aborts on send/recv of CUDA tensors (seen on an H100, docs/gpu.md); its
    collectives stage them through the host, so two ranks may share one GPU. NCCL refuses that."""
    from ddpbench import strategies

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    ranks = rank.Ranks(rank=0, world=2, local_rank=0, local_world=2, launched=True)
    reason = train.skip_reason(CellParams(device="cuda", backend="gloo", strategy=name), ranks)
    if strategies.get(name).point_to_point:
        assert "point to point" in reason and "nccl" in reason
    else:
        assert reason is None
    nccl = train.skip_reason(CellParams(device="cuda", strategy=name), ranks)
    assert "needs as many GPUs" in nccl and "backend gloo" in nccl
    assert rank.cuda_device(CellParams(device="cuda", backend="gloo"), rank.Ranks(1, 2, 1, 2, True)).index == 0


def test_multi_rank_strategy_at_world_one_is_skipped(tmp_path):
    """The ranks' own check (the launcher decides the same before starting torchrun: the
    integration tests compare the two summaries), with the whole provenance."""
    from ddpbench.core import sysinfo

    s = run(tmp_path, strategy="ddp")
    assert s["status"] == "skipped" and "world size" in s["reason"]
    assert not [k for k in sysinfo.PROVENANCE_KEYS if k not in s["env"]]


def test_missing_data_is_a_failed_summary(tmp_path):
    s = run(tmp_path, strategy="single", dataset="mnist", data_root=str(tmp_path / "none"))
    assert s["status"] == "failed" and "ddpbench data" in s["reason"]
    assert (tmp_path / "error_rank0.txt").exists()


def test_single_run_learns_and_writes_everything(tmp_path):
    s = run(tmp_path, strategy="single", synthetic_shape="mnist", dataset_size=256, test_size=64, batch_size=32,
            epochs=2, lr=0.1, min_timed_steps=0, min_timed_s=0)  # fmt: skip
    assert s["status"] == "ok" and s["total_steps"] == 16 and s["timed_steps"] == 13
    assert s["comm_calls_per_step"] == 0 and s["compute_comm_ratio"] is None
    # Learned: read on the 10-step mean, which one noisy batch moves less than the last step's loss.
    assert s["test_acc"] > 0.3 and s["train_loss_last10_mean"] < 2.0  # chance: 0.1 and 2.30
    assert (tmp_path / "steps_rank0.csv").read_text().count("\n") == 17
    # train_loss_final is the last step's loss (steps.csv), the 10-step mean that of the last 10 (equal batches).
    with open(tmp_path / "steps_rank0.csv") as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    assert s["train_loss_final"] == pytest.approx(losses[-1], rel=1e-12)
    assert s["train_loss_last10_mean"] == pytest.approx(sum(losses[-10:]) / 10, rel=1e-12)
    assert s["train_loss_final"] != pytest.approx(s["train_loss_last10_mean"], rel=1e-6)  # two different numbers


def test_run_goes_on_until_both_timing_minimums_are_met(tmp_path):
    # One epoch is 4 steps; the minimums ask for 12 timed steps and 0.4 s of them.
    s = run(tmp_path / "a", strategy="single", dataset_size=64, batch_size=16, test_size=0, min_timed_steps=12,
            min_timed_s=0.4)  # fmt: skip
    assert s["timed_steps"] >= 12 and s["timed_wall_s"] >= 0.4
    assert s["total_steps"] == s["extra"]["steps_run"] > 4 and s["extra"]["measurement_short"] is False
    assert s["epoch_time_s"] == pytest.approx(64 / s["samples_per_s"])
    assert s["env"]["other_cpu_frac"] is not None and s["env"]["loadavg_start"] is not None
    # max_steps caps both minimums, and the summary says the measurement is short.
    s = run(tmp_path / "b", strategy="single", dataset_size=64, batch_size=16, test_size=0, min_timed_steps=12,
            min_timed_s=5.0, max_steps=6)  # fmt: skip
    assert s["total_steps"] == 6 and s["timed_steps"] == 3 and s["extra"]["measurement_short"] is True


def test_planned_steps_extend_epochs_to_the_minimum_and_respect_the_cap():
    p = CellParams(epochs=2, min_timed_steps=20, warmup_steps=2)
    assert loop.planned_steps(p, steps_per_epoch=4, first_timed=3) == 23
    assert loop.planned_steps(p, steps_per_epoch=40, first_timed=3) == 80
    assert loop.planned_steps(CellParams(min_timed_steps=20, max_steps=10), 4, 3) == 10


def test_more_steps_reach_the_timed_seconds_within_cap_and_timeout():
    p = CellParams(min_timed_s=2.0, timeout_s=100)
    assert loop.more_steps(p, timed_steps=10, timed_s=2.5, elapsed_s=3, step=13) == 0
    # 0.1 s per step, 1 s missing: 10 steps and a 10 % margin
    assert loop.more_steps(p, timed_steps=10, timed_s=1.0, elapsed_s=3, step=13) == 11
    assert loop.more_steps(CellParams(min_timed_s=2.0, max_steps=15), 10, 1.0, 3, 13) == 2
    # half the timeout (50 s) is the budget: 49 s used leaves room for 10 steps of 0.1 s
    assert loop.more_steps(CellParams(min_timed_s=60.0, timeout_s=100), 10, 1.0, 49, 13) == 10


def test_environment_block():
    env = sysinfo.environment("gloo", 2)
    for key in ("host", "cores", "ram_gb", "python", "torch", "torchvision", "cuda", "cudnn", "nccl", "gpu_name",
                "backend", "threads_per_rank", "env_vars", "git_commit", "container_image"):  # fmt: skip
        assert key in env
    assert all(k.startswith(sysinfo.ENV_PREFIXES) for k in env["env_vars"])


def test_container_image_from_the_environment(monkeypatch):
    monkeypatch.setenv("DDPBENCH_CONTAINER_IMAGE", "ddpbench-cpu:1")
    assert sysinfo.environment(None, 1)["container_image"] == "ddpbench-cpu:1"


def test_cgroup_quota_limits_the_usable_cores(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert sysinfo.cgroup_cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert sysinfo.cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert sysinfo.cgroup_cpu_quota(tmp_path) == 2.0


def test_a_run_that_meets_min_timed_s_is_not_called_short(tmp_path):
    """The last agreement pause comes after the last step: it is not taken off the timed wall
    (it was, and runs ended a millisecond short of min_timed_s, flagged 'few timed steps')."""
    s = run(tmp_path, strategy="single", dataset_size=64, batch_size=16, test_size=0, min_timed_steps=1,
            min_timed_s=0.3)  # fmt: skip
    assert s["timed_wall_s"] >= 0.3 and s["extra"]["measurement_short"] is False
