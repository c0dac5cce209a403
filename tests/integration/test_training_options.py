"""The training options of today's data parallelism, for every strategy they apply to:
AdamW and gradient accumulation keep every exact strategy where `single` ends at the same
global batch; bf16 and fp16 train with every strategy that accepts them; the FSDP strategies
count their all-gathers and reduce-scatters as the shards' sizes say, and every strategy
reports the bytes each rank holds, counted from its own tensors."""

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from harness_common import exact_strategies, torchrun

from ddpbench import strategies
from ddpbench.strategies import base

# A global batch of 12 splits into 2 ranks x 4 micro-batches and 3 ranks x 2 (both uneven at
# 3 ranks x 4: refused by the plan); 12 steps cross an epoch of 8.
FLAGS = [
    "--dataset", "synthetic", "--synthetic-shape", "mnist", "--dataset-size", "96", "--test-size", "30",
    "--batch-size", "12", "--max-steps", "12", "--warmup-steps", "1", "--bucket-mb", "0.25",
    "--lr", "0.05", "--momentum", "0.9", "--seed", "3",
]  # fmt: skip
HERE = Path(__file__).resolve().parent
ADAMW = "optimizer=adamw,lr=0.001,weight_decay=0.01"
NHWC = "memory_format=channels_last"
ACCUM = {2: (2, 3), 4: (2,)}  # grad_accum -> world sizes whose ranks each get >= grad_accum samples
RTOL = 1e-5
PRECISION_STEPS = 30


def cell_dir(root, cell):
    strategy, model, *more = cell.split(":")
    return root / "-".join([strategy, model, *(more[0].split(",") if more else [])])


def launch(root, world, cells, flags=FLAGS):
    proc = torchrun(world, str(HERE / "_cells.py"), str(root), *cells, "--", *flags)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def nhwc_strategies():
    """The exact strategies that take channels_last (FSDP2 refuses a non-contiguous parameter: the
    plan says so, core.params.check_training_setup)."""
    from ddpbench.core.params import CellConflict, check_training_setup

    def takes(s):
        try:
            check_training_setup({"strategy": s, "device": "cpu", "memory_format": "channels_last"})
        except CellConflict:
            return False
        return True

    return [s for s in exact_strategies() if takes(s)]


def exact_cells(world):
    cells = [f"{s}:mlp:{ADAMW}" for s in exact_strategies()]
    cells += [f"{s}:simple_cnn:{NHWC}" for s in nhwc_strategies() if world == 2]
    cells += [f"{s}:mlp:grad_accum={k}" for s in exact_strategies() for k, worlds in ACCUM.items() if world in worlds]
    return cells


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("options")
    launch(root / "w1", 1, ["single:mlp", f"single:mlp:{ADAMW}", "single:simple_cnn"])
    for world in (2, 3):
        launch(root / f"w{world}", world, exact_cells(world))
    return root


def params(path):
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"]
    return torch.load(path / "params.pt")


def flat(state):
    return torch.cat([state[k].flatten() for k in sorted(state)])


@pytest.mark.parametrize("world", (2, 3))
@pytest.mark.parametrize("strategy", exact_strategies())
def test_adamw_ends_where_single_ends(strategy, world, runs):
    """AdamW divides each gradient by its own running magnitude, so the few elements whose
    gradient is near AdamW's eps (1e-8) turn rounding differences of the summation order
    into visible ones: the comparison is the whole parameter vector's relative l2 distance
    (16 of 535,818 elements differ by more than 1e-7 for every distributed strategy alike)."""
    ours = flat(params(cell_dir(runs / f"w{world}", f"{strategy}:mlp:{ADAMW}")))
    single = flat(params(cell_dir(runs / "w1", f"single:mlp:{ADAMW}")))
    assert float((ours - single).norm() / single.norm()) <= RTOL
    # The field's fastest step: torch's fused AdamW where it has the kernel (CPU since torch 2.4).
    summary = json.loads((cell_dir(runs / f"w{world}", f"{strategy}:mlp:{ADAMW}") / "summary.json").read_text())
    fused = base.fused_adamw_supported([torch.zeros(1)])
    assert summary["extra"]["optimizer_impl"] == ("fused" if fused else "foreach")


@pytest.mark.parametrize("strategy", nhwc_strategies())
def test_channels_last_ends_where_contiguous_single_ends(strategy, runs):
    """Issue 70, item 3: memory_format channels_last (a whole-model converter, run.transforms) on a
    convolutional model, every exact strategy at world size 2, ends where single ends with the
    contiguous layout: the same arithmetic in other kernels, and each batch laid out as the model."""
    path = cell_dir(runs / "w2", f"{strategy}:simple_cnn:{NHWC}")
    ours, single = params(path), params(cell_dir(runs / "w1", "single:simple_cnn"))
    assert max(float((ours[k] - single[k]).abs().max() / single[k].abs().max()) for k in single) <= RTOL
    summary = json.loads((path / "summary.json").read_text())
    assert summary["params"]["memory_format"] == "channels_last" and summary["extra"]["converted"] == "memory_format"


@pytest.mark.parametrize("world, accum", [(w, k) for k, worlds in ACCUM.items() for w in worlds])
@pytest.mark.parametrize("strategy", exact_strategies())
def test_gradient_accumulation_equals_the_full_batch(strategy, world, accum, runs):
    path = cell_dir(runs / f"w{world}", f"{strategy}:mlp:grad_accum={accum}")
    ours, single = params(path), params(cell_dir(runs / "w1", "single:mlp"))
    assert max(float((ours[k] - single[k]).abs().max() / single[k].abs().max()) for k in single) <= RTOL
    # One synchronisation per optimizer step: the calls of a step do not grow with grad_accum
    # (FSDP's all-gathers do: they run per micro-batch forward and backward; its
    # reduce-scatters do not).
    base = json.loads((cell_dir(runs / f"w{world}", f"{strategy}:mlp:{ADAMW}") / "summary.json").read_text())
    summary = json.loads((path / "summary.json").read_text())
    if not strategy.startswith("fsdp"):
        assert summary["comm_calls_per_step"] == base["comm_calls_per_step"]
    assert summary["global_batch"] == 12 and summary["timed_steps"] == 10


def shard_numel(shape, world):
    """FSDP2 pads dim 0 to a multiple of the world size and gives each rank one slice."""
    return math.ceil(shape[0] / world) * math.prod(shape[1:])


@pytest.mark.parametrize("world", (2, 3))
@pytest.mark.parametrize("strategy, gathers", [("fsdp", 2), ("fsdp_grad_op", 1)])
def test_fsdp_counts_its_collectives_from_the_shards(strategy, gathers, world, runs):
    """Per optimizer step (grad_accum 1, the AdamW cells), each of the MLP's three Linear
    units all-gathers its parameters `gathers` times (ZeRO-3: forward and backward; ZeRO-2:
    forward) and reduce-scatters its gradients once; a rank sends (p-1)/p of each
    all-gather's output and reduce-scatter's input (fp32: 4 bytes per element)."""
    summary = json.loads((cell_dir(runs / f"w{world}", f"{strategy}:mlp:{ADAMW}") / "summary.json").read_text())
    single = params(cell_dir(runs / "w1", "single:mlp"))
    units = [("1.weight", "1.bias"), ("3.weight", "3.bias"), ("5.weight", "5.bias")]
    per_unit = [world * sum(shard_numel(single[n].shape, world) for n in unit) * 4 for unit in units]
    ring = (world - 1) / world
    assert summary["comm_calls_per_step"] == (gathers + 1) * len(units)
    assert summary["comm_bytes_per_step"] == pytest.approx((gathers + 1) * sum(round(b * ring) for b in per_unit), abs=1)
    assert summary["extra"]["comm_volume"] == ("sharded_zero3" if gathers == 2 else "sharded_zero2")
    # Counted through FSDP's public custom-communication hooks where this torch has them, else at
    # torch.distributed's collectives it calls (torch 2.8): the same counts either way.
    from torch.distributed.fsdp import FSDPModule

    hooks = hasattr(FSDPModule, "set_custom_all_gather")
    assert summary["extra"]["fsdp_comm_counted"] == ("custom_comm" if hooks else "torch.distributed")
    # On CPU, FSDP's collectives block the training thread: all of it is exposed.
    assert summary["phase_exposed_comm_s"] == pytest.approx(summary["phase_comm_s"], rel=1e-9)


@pytest.mark.parametrize("world", (2, 3))
def test_memory_held_per_rank_is_counted_from_the_shards(world, runs):
    """At p ranks FSDP holds each parameter's padded 1/p slice, its gradient and AdamW's two
    moments of it; DDP holds all of them; ZeRO-1 holds DDP's parameters and gradients and
    the optimizer state of its greedy partition (whole parameters, largest first)."""
    single = params(cell_dir(runs / "w1", "single:mlp"))
    full = sum(t.numel() for t in single.values()) * 4
    shard = sum(shard_numel(t.shape, world) for t in single.values()) * 4
    extra = {
        s: json.loads((cell_dir(runs / f"w{world}", f"{s}:mlp:{ADAMW}") / "summary.json").read_text())["extra"]
        for s in ("ddp", "zero", "fsdp", "fsdp_grad_op")
    }
    step = 4  # AdamW's step counter: one fp32 scalar tensor per parameter
    for s in ("fsdp", "fsdp_grad_op"):
        assert extra[s]["param_bytes"] == shard and extra[s]["grad_bytes"] == shard
        assert extra[s]["optimizer_state_bytes"] == 2 * shard + step * len(single)
    assert extra["ddp"]["param_bytes"] == extra["ddp"]["grad_bytes"] == full
    assert extra["ddp"]["optimizer_state_bytes"] == 2 * full + step * len(single)
    # ZeRO-1: torch's partition gives each rank whole parameters, largest first, to the lightest rank.
    loads = [0] * world
    counts = [0] * world
    for t in sorted(single.values(), key=lambda t: -t.numel()):
        r = loads.index(min(loads))
        loads[r] += t.numel() * 4
        counts[r] += 1
    assert extra["zero"]["optimizer_state_bytes"] == max(2 * b + step * c for b, c in zip(loads, counts))
    assert extra["zero"]["param_bytes"] == full
    # At p = 2 the FSDP strategies hold about half of DDP's parameter + optimizer bytes.
    if world == 2:
        ratio = (extra["fsdp"]["param_bytes"] + extra["fsdp"]["optimizer_state_bytes"]) / (
            extra["ddp"]["param_bytes"] + extra["ddp"]["optimizer_state_bytes"]
        )
        assert ratio == pytest.approx(0.5, abs=0.001)


def mixed_cells():
    return [
        f"{s}:mlp:precision={p}"
        for s in strategies.names()
        if s not in ("single", "pipeline")  # single runs alone; pipeline is fp32 only (refused)
        for p in ("bf16", "fp16")
    ]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    flags = [*FLAGS, "--max-steps", str(PRECISION_STEPS), "--min-timed-steps", str(PRECISION_STEPS - 2),
             "--min-timed-s", "0", "--powersgd-start-iter", "2"]  # fmt: skip
    launch(root, 2, mixed_cells(), flags)
    return root


@pytest.mark.parametrize("cell", mixed_cells())
def test_low_precision_trains_with_every_strategy_that_accepts_it(cell, mixed):
    path = cell_dir(mixed, cell)
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"]
    with open(path / "steps_rank0.csv") as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    assert len(losses) == PRECISION_STEPS and all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:3]) / 3
    assert summary["params"]["precision"] in ("bf16", "fp16")
    if summary["params"]["precision"] == "fp16":
        assert summary["extra"]["loss_scale_final"] == 2.0**16 and summary["extra"]["skipped_steps"] == 0
    else:
        assert summary["extra"]["loss_scale_final"] is None
