"""train.run without torchrun (world size 1): statuses that need no process group."""

import json

import pytest

from ddpbench import sysinfo, train
from ddpbench.params import CellParams


@pytest.fixture(autouse=True)
def keep_threads():
    """train.run sets this process's thread count and OMP_NUM_THREADS: restore them."""
    import os

    import torch

    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    yield
    torch.set_num_threads(threads)
    if omp is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = omp


def run(tmp_path, **kw):
    assert train.run(CellParams(**kw), tmp_path) in (0, 1)
    return json.loads((tmp_path / "summary.json").read_text())


def test_cuda_without_gpus_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    s = run(tmp_path, device="cuda", strategy="single")
    assert s["status"] == "skipped" and "CUDA is not available" in s["reason"]
    assert s["params"]["device"] == "cuda" and s["env"]["host"]


def test_multi_rank_strategy_at_world_one_is_skipped(tmp_path):
    s = run(tmp_path, strategy="ddp")
    assert s["status"] == "skipped" and "world size" in s["reason"]


def test_missing_data_is_a_failed_summary(tmp_path):
    s = run(tmp_path, strategy="single", dataset="mnist", data_root=str(tmp_path / "none"))
    assert s["status"] == "failed" and "ddpbench.data" in s["reason"]
    assert (tmp_path / "error_rank0.txt").exists()


def test_single_run_learns_and_writes_everything(tmp_path):
    s = run(tmp_path, strategy="single", synthetic_shape="mnist", dataset_size=256, test_size=64, batch_size=32,
            epochs=2, lr=0.1)  # fmt: skip
    assert s["status"] == "ok" and s["total_steps"] == 16 and s["timed_steps"] == 13
    assert s["comm_calls_per_step"] == 0 and s["compute_comm_ratio"] is None
    assert s["test_acc"] > 0.3 and s["train_loss_final"] < 2.0  # chance: 0.1 and 2.30
    assert (tmp_path / "steps_rank0.csv").read_text().count("\n") == 17


def test_environment_block():
    env = sysinfo.environment("gloo", 2)
    for key in ("host", "cores", "ram_gb", "python", "torch", "torchvision", "cuda", "cudnn", "nccl", "gpu_name",
                "backend", "threads_per_rank", "env_vars", "git_commit", "container_image"):  # fmt: skip
        assert key in env
    assert all(k.startswith(("OMP_", "NCCL_", "GLOO_")) for k in env["env_vars"])


def test_container_image_from_the_environment(monkeypatch):
    monkeypatch.setenv("DDPBENCH_CONTAINER_IMAGE", "ddpbench-cpu:1")
    assert sysinfo.environment(None, 1)["container_image"] == "ddpbench-cpu:1"
