"""Shared launches: each torchrun start costs seconds per rank (importing torch), so the
correctness cells of one world size share one launch (session-scoped fixtures)."""

from pathlib import Path

import pytest
from harness_common import CELL_FLAGS, MODELS, WORLDS, exact_strategies, torchrun

HERE = Path(__file__).resolve().parent


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
    import os

    import torch

    from ddpbench.run import train
    from ddpbench.core.params import CellParams

    root = tmp_path_factory.mktemp("single")
    parser = argparse.ArgumentParser()
    CellParams.add_arguments(parser)
    threads, env = torch.get_num_threads(), dict(os.environ)
    for model in MODELS:
        params = CellParams.from_namespace(parser.parse_args([*CELL_FLAGS, "--strategy", "single", "--model", model]))
        out = root / f"single-{model}"
        assert train.run(params, out, out / "params.pt") == 0
    torch.set_num_threads(threads)  # train.run set them for this process
    os.environ.clear()
    os.environ.update(env)
    return root
