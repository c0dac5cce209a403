"""Shared launches: each torchrun start costs seconds per rank (importing torch), so the
correctness cells of one world size share one launch (module-scoped fixtures)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Tiny but real: mnist-shaped synthetic data, a global batch of 10 (uneven shards at
# world 3), 12 steps (crossing an epoch of 9), small buckets (several per model).
CELL_FLAGS = [
    "--dataset", "synthetic", "--synthetic-shape", "mnist", "--dataset-size", "96", "--test-size", "30",
    "--batch-size", "10", "--max-steps", "12", "--warmup-steps", "1", "--bucket-mb", "0.25",
    "--lr", "0.05", "--momentum", "0.9", "--seed", "3",
]  # fmt: skip
WORLDS = (2, 3)
MODELS = ("mlp", "simple_cnn")


def exact_strategies() -> list[str]:
    from ddpbench import strategies

    return [n for n in strategies.names() if n != "single" and strategies.get(n).exact]


def torchrun(nproc: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def cells_dir(tmp_path_factory):
    """world size -> folder with one run per exact strategy x model (one launch per world size)."""
    root = tmp_path_factory.mktemp("cells")
    cells = [f"{s}:{m}" for s in exact_strategies() for m in MODELS]
    runs = {}
    for world in WORLDS:
        out = root / f"w{world}"
        proc = torchrun(world, str(HERE / "_cells.py"), str(out), *cells, "--", *CELL_FLAGS)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        runs[world] = out
    return runs


@pytest.fixture(scope="session")
def single_dir(tmp_path_factory):
    """The baseline: `single` in this process (world size 1, no process group)."""
    import argparse

    from ddpbench import train
    from ddpbench.params import CellParams

    root = tmp_path_factory.mktemp("single")
    parser = argparse.ArgumentParser()
    CellParams.add_arguments(parser)
    for model in MODELS:
        params = CellParams.from_namespace(parser.parse_args([*CELL_FLAGS, "--strategy", "single", "--model", model]))
        out = root / f"single-{model}"
        assert train.run(params, out, out / "params.pt") == 0
    return root
