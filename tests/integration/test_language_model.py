"""gpt_tiny on synthetic_tokens through the harness: every strategy that is not
image-specific trains it at world size 2, with activation checkpointing (selective); the exact
ones end where `single` (without it) ends; the loss falls from ln(vocab_size) over steps; token
cells report tokens/s, and MFU and HFU (the recompute counted)."""

import json
import math
from pathlib import Path

import pytest
from harness_common import exact_strategies, torchrun
from test_exact_strategies import RTOL, max_relative_difference

from ddpbench import strategies
from ddpbench.core.params import CellParams, CellConflict, check_cell

# Sequences of 32 tokens over a vocabulary of 64, a global batch of 8, 10 steps.
TOKEN_FLAGS = [
    "--model", "gpt_tiny", "--dataset", "synthetic_tokens", "--vocab-size", "64", "--seq-len", "32",
    "--dataset-size", "64", "--test-size", "16", "--batch-size", "8", "--max-steps", "10",
    "--warmup-steps", "1", "--bucket-mb", "0.25", "--lr", "0.05", "--seed", "5", "--powersgd-start-iter", "3",
]  # fmt: skip
WORLD = 2
CELLS = str(Path(__file__).resolve().parent / "_cells.py")


def gpt_parameters(vocab: int, context: int, d: int, layers: int) -> int:
    """Embeddings (the head is tied to the token one), per block two LayerNorms (2d each),
    qkv (3d^2 + 3d), the output projection (d^2 + d) and the MLP (4d^2 + 4d, 4d^2 + d),
    and the final LayerNorm."""
    return vocab * d + context * d + layers * (12 * d * d + 13 * d) + 2 * d


def applicable() -> list[str]:
    """The registered strategies the plan lets train gpt_tiny at world size 2."""
    values = {**CellParams(model="gpt_tiny", dataset="synthetic_tokens").as_dict(), "world_size": WORLD}
    names = []
    for name in strategies.names():
        if name == "single":
            continue
        try:
            check_cell({**values, "strategy": name})
        except CellConflict:
            continue
        names.append(name)
    return names


def test_pipeline_refuses_the_gpt_naming_why():
    values = {**CellParams(model="gpt_tiny", dataset="synthetic_tokens").as_dict(), "world_size": WORLD}
    with pytest.raises(CellConflict, match="nn.Sequential.*gpt_tiny"):
        check_cell({**values, "strategy": "pipeline"})


@pytest.fixture(scope="module")
def gpt_runs(tmp_path_factory):
    import argparse
    import os

    import torch

    from ddpbench.run import train

    root = tmp_path_factory.mktemp("gpt")
    # Every strategy with its first block's activations recomputed (selective: every other block),
    # single without: "checkpointing changes no result" across the registry, at no extra launch.
    cells = (f"{s}:gpt_tiny" for s in applicable())
    proc = torchrun(WORLD, CELLS, str(root), *cells, "--", *TOKEN_FLAGS, "--activation-checkpointing", "selective")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    parser = argparse.ArgumentParser()
    CellParams.add_arguments(parser)
    threads, env = torch.get_num_threads(), dict(os.environ)
    params = CellParams.from_namespace(parser.parse_args([*TOKEN_FLAGS, "--strategy", "single"]))
    assert train.run(params, root / "single-gpt_tiny", root / "single-gpt_tiny" / "params.pt") == 0
    torch.set_num_threads(threads)
    os.environ.clear()
    os.environ.update(env)
    return root


def test_every_applicable_strategy_trains_the_gpt(gpt_runs):
    assert {"ddp", "fsdp", "bucketed_allreduce", "local_sgd"} <= set(applicable())
    for name in applicable():
        summary = json.loads((gpt_runs / f"{name}-gpt_tiny" / "summary.json").read_text())
        assert summary["status"] == "ok", (name, summary["reason"])
        assert summary["extra"]["model_parameters"] == gpt_parameters(vocab=64, context=32, d=128, layers=2), name
        assert math.isfinite(summary["train_loss_final"]) and summary["train_loss_final"] < math.log(64), name
        assert summary["tokens_per_s"] == pytest.approx(summary["samples_per_s"] * 32), name
        assert 0 <= summary["test_acc"] <= 1 and summary["test_loss"] > 0, name
        extra = summary["extra"]  # block 0 of 2 recomputed: its forward again in the backward
        assert (extra["blocks"], extra["checkpointed_blocks"]) == (2, 1), name
        assert extra["train_flops_per_sample"] < extra["hardware_flops_per_sample"] < 1.25 * extra["train_flops_per_sample"]
        assert extra["hfu_measured"] > extra["mfu_measured"] > 0, name


@pytest.mark.parametrize("strategy", [s for s in exact_strategies() if s != "pipeline"])
def test_exact_strategies_end_where_single_ends(strategy, gpt_runs):
    import torch

    ours = torch.load(gpt_runs / f"{strategy}-gpt_tiny" / "params.pt")
    single = torch.load(gpt_runs / "single-gpt_tiny" / "params.pt")
    assert max_relative_difference(ours, single) <= RTOL
    # the sampled final weights the reports compare say the same (extra.param_sample)
    import numpy as np

    sample = {name: np.array(json.loads((gpt_runs / f"{name}-gpt_tiny" / "summary.json").read_text())["extra"]["param_sample"]
                             .split(), float) for name in (strategy, "single")}  # fmt: skip
    assert np.linalg.norm(sample[strategy] - sample["single"]) <= RTOL * np.linalg.norm(sample["single"])


def test_the_loss_falls_over_a_few_hundred_steps(tmp_path):
    import os

    import torch

    from ddpbench.run import train

    threads, env = torch.get_num_threads(), dict(os.environ)
    params = CellParams.from_mapping({
        **CellParams().as_dict(), "strategy": "single", "model": "gpt_tiny", "dataset": "synthetic_tokens",
        "vocab_size": 64, "seq_len": 32, "dataset_size": 512, "test_size": 64, "batch_size": 16,
        "max_steps": 200, "epochs": 100, "optimizer": "adamw", "lr": 0.003, "warmup_steps": 1,
        "min_timed_steps": 1, "min_timed_s": 0.0,
    })  # fmt: skip
    assert train.run(params, tmp_path) == 0
    torch.set_num_threads(threads)
    os.environ.clear()
    os.environ.update(env)
    summary = json.loads((tmp_path / "summary.json").read_text())
    steps = (tmp_path / "steps_rank0.csv").read_text().splitlines()
    first_loss = float(steps[1].split(",")[steps[0].split(",").index("loss")])
    assert first_loss == pytest.approx(math.log(64), rel=0.1)  # uniform at the start
    assert summary["train_loss_final"] < 0.5 * math.log(64)  # the chain has ~1 nat of entropy per token
    assert summary["test_loss"] < 0.5 * math.log(64) and summary["test_acc"] > 0.3
