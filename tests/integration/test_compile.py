"""Compiled training (compile: model, run.transforms): every strategy composes with it, the exact
ones end where `single` ends, and compiled ddp and fsdp at world sizes 2 and 3 end where compiled
single ends, with inductor, the backend training uses. The compile is recorded apart from the
timed steps. Tiny models: inductor's first compile of a graph takes seconds on 2 cores."""

import json
import os

import pytest
import torch

from harness_common import CELL_FLAGS, torchrun
from test_exact_strategies import RTOL, max_relative_difference

from ddpbench import strategies
from ddpbench.run import transforms

HERE = os.path.dirname(os.path.abspath(__file__))
CELLS = os.path.join(HERE, "_cells.py")
COMPILED = "compile=model"
INDUCTOR = {1: ["single"], 2: ["ddp", "fsdp"], 3: ["ddp", "fsdp"]}


def every_strategy() -> list[str]:
    return [n for n in strategies.names() if n != "single"]


# What a strategy needs of the tiny cell: micro-batches that split a batch of 10, compression
# starting early enough to leave timed steps.
NEEDS = {"pipeline": ",micro_batches=2", "powersgd": ",powersgd_start_iter=3"}


def cell(strategy: str) -> str:
    return f"{strategy}:mlp:{COMPILED}{NEEDS.get(strategy, '')}"


def launch(world: int, out, cells: list[str], backend: str | None = None) -> None:
    env = {transforms.BACKEND_ENV: backend} if backend else {}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        proc = torchrun(world, CELLS, str(out), *cells, "--", *CELL_FLAGS, timeout=600)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """Every strategy at world size 2, compiled with aot_eager (dynamo and AOTAutograd: how a
    strategy composes with compile, without inductor's code generation)."""
    out = tmp_path_factory.mktemp("composed")
    launch(2, out, [cell(s) for s in every_strategy()], backend="aot_eager")
    return out


@pytest.fixture(scope="module")
def inductor(tmp_path_factory):
    """single, and ddp and fsdp at world sizes 2 and 3, compiled with inductor."""
    root = tmp_path_factory.mktemp("inductor")
    for world, names in INDUCTOR.items():
        launch(world, root / f"w{world}", [cell(s) for s in names])
    return root


def summary_of(run) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"]
    return summary


@pytest.mark.parametrize("strategy", every_strategy())
def test_every_strategy_composes_with_compile(strategy, composed, single_dir):
    run = composed / cell(strategy).replace(":", "-").replace(",", "-")
    summary = summary_of(run)
    extra = summary["extra"]
    assert extra["compiled_blocks"] == extra["blocks"] == 3 and extra["compile_backend"] == "aot_eager"
    assert extra["compiled_loss"] is True  # the loss compiled with the blocks (transforms.loss)
    assert extra["compile_s"] is not None and extra["compile_s"] >= 0 and extra["compiled_graphs"] >= 1
    if strategies.get(strategy).exact:  # the same update as eager single, within the exactness test's bound
        ours, single = torch.load(run / "params.pt"), torch.load(single_dir / "single-mlp" / "params.pt")
        assert max_relative_difference(ours, single) <= RTOL


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_compiled_ddp_and_fsdp_end_where_compiled_single_ends(strategy, world, inductor):
    single = summary_of(inductor / "w1" / f"single-mlp-{COMPILED}")
    run = inductor / f"w{world}" / f"{strategy}-mlp-{COMPILED}"
    summary = summary_of(run)
    assert summary["extra"]["compile_backend"] == "inductor" and single["extra"]["compile_backend"] == "inductor"
    ours, ref = torch.load(run / "params.pt"), torch.load(inductor / "w1" / f"single-mlp-{COMPILED}" / "params.pt")
    assert max_relative_difference(ours, ref) <= RTOL
    # The compile happens in the untimed first step: it costs more than a timed step, never in one.
    assert summary["extra"]["compile_s"] > summary["step_time_median_s"]
    assert summary["timed_steps"] == 10 and summary["step_time_median_s"] < summary["extra"]["compile_s"]

