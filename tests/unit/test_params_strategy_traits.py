"""check_cell asks a strategy what it is (its traits and SETTINGS), never its name (issue 70, item 2):
the pipeline's refusals follow from cutting the model into stages, reading micro_batches and not
implementing mixed precision, so another strategy that declares the same is refused the same cells."""

import ast
import dataclasses
import inspect

import pytest

from ddpbench import strategies
from ddpbench.core import params
from ddpbench.core.params import CellConflict, CellParams, check_cell
from ddpbench.strategies import strategy_settings, strategy_traits

pytestmark = pytest.mark.unit


def cell(**changes):
    return {**CellParams().as_dict(), "world_size": 2, **changes}


@pytest.fixture
def ddp_like_pipeline(monkeypatch):
    """ddp declaring what the pipeline declares: stages, micro_batches, no mixed precision."""
    piped = dataclasses.replace(strategy_traits("ddp"), sharding="stages", mixed_precision=False)
    monkeypatch.setattr(params, "strategy_traits", lambda n: piped if n == "ddp" else strategy_traits(n))
    monkeypatch.setattr(params, "strategy_settings", lambda n: (*strategy_settings(n), params.MICRO_BATCHES))


def test_the_pipeline_declares_what_check_cell_refuses():
    traits = strategy_traits("pipeline")
    assert traits.sharding == "stages" and not traits.mixed_precision
    assert params.MICRO_BATCHES in strategy_settings("pipeline")
    assert all(strategy_traits(n).mixed_precision for n in strategies.names() if n != "pipeline")


@pytest.mark.parametrize(
    "changes, names",
    [
        (dict(model="resnet18"), ("strategy", "model")),
        (dict(model="mlp", world_size=8, batch_size=64), ("strategy", "model", "world_size")),
        (dict(batch_size=30, micro_batches=4), ("batch_size", "micro_batches")),
        (dict(grad_accum=2), ("grad_accum", "strategy")),
        (dict(precision="bf16"), ("precision", "strategy")),
    ],
)
def test_a_strategy_declaring_the_pipelines_traits_is_refused_what_it_is(ddp_like_pipeline, changes, names):
    with pytest.raises(CellConflict) as refused:
        check_cell(cell(strategy="ddp", **changes))
    said = str(refused.value)
    assert refused.value.names == names and ("strategy ddp" in said or "strategy=ddp" in said), said
    check_cell(cell(strategy="ddp"))  # the defaults suit it still


def test_check_cell_names_no_strategy():
    """Strategy-specific refusals live on the strategy's declaration: core/params.py's checks compare
    no value with a registered strategy's name."""
    names = set(strategies.names())
    tree = ast.parse(inspect.getsource(params))
    checks = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("check")]
    spelled = [(f.name, c.value) for f in checks for c in ast.walk(f) if isinstance(c, ast.Constant) and c.value in names]
    used = [(f.name, c.id) for f in checks for c in ast.walk(f) if isinstance(c, ast.Name) and c.id == "PIPELINE"]
    assert {f.name for f in checks} >= {"check_cell", "check_training_setup", "check_stages"}
    assert spelled == [] and used == [], (spelled, used)
