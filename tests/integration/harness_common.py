"""Shared by the harness's integration tests (a unique module name: test folders are not packages)."""

import os
import subprocess
import sys

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


