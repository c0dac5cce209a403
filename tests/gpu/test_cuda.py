"""The CUDA path on a real GPU: every strategy through the launcher, the timing's
bookkeeping, pinned-memory loading, peak memory, batch-size auto's out-of-memory search.

Skipped where torch sees no GPU (CI). With one GPU, NCCL cannot run two ranks (it refuses
two ranks of one communicator on one device), so multi-rank strategies run with backend
gloo on CUDA tensors, the ranks sharing the GPU; gloo does not send CUDA tensors point
to point, so gather_scatter and ring_allreduce are recorded as skipped there (the test
checks the reason). With two GPUs or more they run with NCCL, one GPU per rank.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from ddpbench import strategies

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch"),
]

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
# A small real cell: simple CNN on CIFAR-shaped data, several DDP buckets, a few timed steps.
FLAGS = [
    "--device", "cuda", "--model", "simple_cnn", "--dataset-size", "512", "--test-size", "64",
    "--batch-size", "64", "--bucket-mb", "0.25", "--min-timed-steps", "5", "--min-timed-s", "0",
    "--warmup-steps", "1", "--num-workers", "2", "--timeout-s", "180",
]  # fmt: skip
PHASE_COLUMNS = ("data_s", "forward_s", "backward_s", "exposed_comm_s", "optimizer_s", "other_s")


def launch(out, nproc, *flags, dump=None):
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", str(nproc), "--out", str(out), *flags]
    if dump:
        cmd += ["--dump-params", str(dump)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def world_and_backend(name):
    """(world size, backend) a strategy runs at here: 1 for single; else 2 ranks, NCCL when
    there are GPUs enough, gloo on a shared GPU otherwise."""
    if name == "single":
        return 1, "auto"
    return 2, ("auto" if GPUS >= 2 else "gloo")


def step_rows(run_dir):
    import csv

    rows = []
    for path in sorted(run_dir.glob("steps_rank*.csv")):
        with open(path) as f:
            rows += [r for r in csv.DictReader(f) if r["timed"] == "1"]
    return rows


@pytest.mark.parametrize("name", strategies.names())
def test_strategy_runs_on_cuda(tmp_path, name):
    world, backend = world_and_backend(name)
    summary = launch(tmp_path, world, *FLAGS, "--strategy", name, "--backend", backend)
    strategy = strategies.get(name)
    if backend == "gloo" and strategy.point_to_point:
        assert summary["status"] == "skipped" and "point to point" in summary["reason"], summary["reason"]
        return
    assert summary["status"] == "ok", summary["reason"]
    env = summary["env"]
    assert env["backend"] == ("nccl" if backend == "auto" else "gloo")
    assert env["gpu_name"] and env["cuda"], env
    assert summary["timed_steps"] >= 5
    assert summary["cuda_max_allocated_mb"] > 0
    # Phases partition each rank's step on CUDA too (events at every boundary).
    for row in step_rows(tmp_path):
        total = float(row["total_s"])
        assert total > 0
        parts = sum(float(row[c]) for c in PHASE_COLUMNS)
        assert parts == pytest.approx(total, rel=1e-3, abs=1e-5), row
        assert 0 <= float(row["exposed_comm_s"]) <= float(row["comm_s"]) + 1e-6, row
    if world > 1 and name not in ("local_sgd",):
        assert summary["comm_calls_per_step"] > 0


def test_exact_strategies_match_single_on_cuda(tmp_path):
    """mlp (no cuDNN, no TF32 in matmuls by default): the exact strategies' final weights
    equal single's up to float32 summation order."""
    flags = [*FLAGS, "--model", "mlp"]
    launch(tmp_path / "single", 1, *flags, "--strategy", "single", dump=tmp_path / "single.pt")
    ref = torch.load(tmp_path / "single.pt")
    checked = 0
    for name in strategies.names():
        strategy = strategies.get(name)
        world, backend = world_and_backend(name)
        if name == "single" or not strategy.exact or (backend == "gloo" and strategy.point_to_point):
            continue
        summary = launch(tmp_path / name, world, *flags, "--strategy", name, "--backend", backend, dump=tmp_path / f"{name}.pt")
        assert summary["status"] == "ok", summary["reason"]
        ours = torch.load(tmp_path / f"{name}.pt")
        for key, value in ref.items():
            err = float((ours[key] - value).abs().max() / value.abs().max().clamp_min(1e-12))
            assert err < 1e-4, (name, key, err)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("precision", ("fp32", "tf32", "bf16", "fp16"))
@pytest.mark.parametrize("name", ("single", "ddp", "fsdp", "fsdp_grad_op"))
def test_precisions_and_sharding_train_on_cuda(tmp_path, name, precision):
    """Every precision with the baseline, DDP and both FSDP strategies (with AdamW and
    gradient accumulation): the run is measured, its loss finite, fp16 keeps a loss scale,
    and the memory each rank holds is counted. Prints the throughput to quote."""
    world, backend = world_and_backend(name)
    flags = [*FLAGS, "--strategy", name, "--backend", backend, "--precision", precision, "--optimizer", "adamw",
             "--lr", "0.001", "--grad-accum", "2"]  # fmt: skip
    summary = launch(tmp_path, world, *flags)
    assert summary["status"] == "ok", summary["reason"]
    assert summary["train_loss_final"] == summary["train_loss_final"]  # not NaN
    extra = summary["extra"]
    assert extra["held_bytes"] > 0 and extra["param_bytes"] > 0
    assert (extra["loss_scale_final"] is not None) == (precision == "fp16")
    print(f"{name} {precision}: {summary['samples_per_s']:.0f} samples/s, held {extra['held_bytes'] / 2**20:.1f} MiB")


@pytest.mark.skipif(GPUS != 1, reason="needs exactly one GPU")
def test_nccl_with_two_ranks_on_one_gpu_is_skipped_with_the_reason(tmp_path):
    summary = launch(tmp_path, 2, *FLAGS, "--strategy", "allreduce")
    assert summary["status"] == "skipped"
    assert "needs as many GPUs" in summary["reason"] and "backend gloo" in summary["reason"]


@pytest.mark.parametrize("model", ["resnet50", "densenet121"])
def test_auto_batch_finds_the_largest_fitting_power_of_two_and_recovers(model):
    """Doubling until out of memory at 224 px: the batch after the chosen one was tried and
    did not fit, memory is released after the error, and a second search in the same process
    gives the same answer."""
    from ddpbench.run import autobatch, models

    device = torch.device("cuda", 0)
    shape = (3, 224, 224)
    net = models.build(model, shape, 10).to(device)
    autobatch.trial_step(net, shape, 2, device)  # cuBLAS/cuDNN workspaces: allocated once per process
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated(device)
    first = autobatch.search(net, shape, device, 0.0, 2**16, 1)
    after_first = torch.cuda.memory_allocated(device)
    second = autobatch.search(net, shape, device, 0.0, 2**16, 1)
    print(f"{model}: torch {torch.__version__}, {torch.cuda.get_device_name(0)}: {first}")
    assert first["chosen"] == second["chosen"] >= 16
    assert first["tried"][-1] == 2 * first["chosen"], "the search must stop at an out-of-memory trial"
    assert first["need_mb"] > 0
    assert after_first == held, "memory leaked by the out-of-memory trial"
    assert torch.cuda.memory_allocated(device) == held


def test_auto_batch_through_the_harness(tmp_path):
    summary = launch(
        tmp_path, 1, *FLAGS, "--strategy", "single", "--model", "resnet18", "--synthetic-shape", "imagenette",
        "--image-size", "64", "--batch-size", "auto", "--scaling", "weak", "--memory-budget-gb", "2",
        "--dataset-size", "4096",
    )  # fmt: skip
    assert summary["status"] == "ok", summary["reason"]
    extra = summary["extra"]
    assert extra["auto_batch"] >= 1 and "over 2.0 GB" in extra["auto_batch_method"]
    assert summary["per_rank_batch"] == extra["auto_batch"]
    # The chosen batch's trial stayed within the budget; the next one was over it.
    assert extra["auto_batch_need_mb"] <= 2 * 1024
