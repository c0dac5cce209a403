import argparse

import pytest

from ddpbench.core.params import IMAGE_MODELS, MODELS, PIPELINE, SEQUENTIAL_LAYERS, CellConflict, CellParams, ParamError, check_cell, check_values
from ddpbench.strategies import names as strategy_names
from ddpbench.strategies import strategy_traits


def test_defaults_validate_and_roundtrip_through_argv():
    p = CellParams()
    parser = argparse.ArgumentParser()
    CellParams.add_arguments(parser)
    again = CellParams.from_namespace(parser.parse_args(p.to_argv()))
    assert again == p


def test_cli_strings_are_coerced():
    p = CellParams.from_mapping({"batch_size": "32", "lr": "0.1", "model": "simple_cnn"})
    assert p.batch_size == 32 and p.lr == 0.1 and p.model == "simple_cnn"
    assert CellParams(batch_size="auto", scaling="weak").batch_size == "auto"


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("device", "tpu", "cpu | cuda"),
        ("model", "alexnet", "mlp"),
        ("batch_size", 0, ">= 1"),
        ("batch_size", "big", "'auto'"),
        ("lr", -1, "> 0"),
        ("epochs", 1.5, "integer"),
        ("scaling", True, "strong | weak"),
        ("profile_steps", -1, ">= 0"),
        ("profile_steps", 2.5, "integer"),
        ("profile_steps", "some", "integer"),
    ],
)
def test_bad_values_name_the_parameter_and_allowed_values(key, value, fragment):
    with pytest.raises(ParamError) as err:
        CellParams.from_mapping({key: value})
    assert f"'{key}'" in str(err.value) and fragment in str(err.value)


def test_unknown_key_is_named():
    with pytest.raises(ParamError, match="'batchsize'"):
        CellParams.from_mapping({"batchsize": 8})
    with pytest.raises(ParamError, match="'colour'"):
        check_values("colour", ["red"])


def test_strategy_choices_come_from_the_registry():
    names = strategy_names()
    assert "base" not in names
    for name in names:
        assert CellParams(strategy=name).strategy == name
    with pytest.raises(ParamError, match="'strategy'"):
        CellParams(strategy="no_such_strategy")


def test_auto_batch_with_strong_scaling_is_refused_naming_scaling():
    # auto fixes the per-rank batch: the global batch would grow with p, yet be labelled speedup
    with pytest.raises(ParamError, match="'scaling'") as err:
        CellParams(batch_size="auto", scaling="strong")
    assert "weak" in str(err.value) and "auto" in str(err.value)
    with pytest.raises(ParamError, match="'scaling'"):
        CellParams.from_mapping({"batch_size": "auto"})  # strong is the default
    assert CellParams(batch_size=64, scaling="strong").scaling == "strong"


def test_backend_nccl_needs_cuda_and_auto_picks_per_device():
    with pytest.raises(ParamError, match="'backend'") as err:
        CellParams(backend="nccl", device="cpu")
    assert "NCCL needs CUDA" in str(err.value)
    assert CellParams(device="cpu").process_group_backend == "gloo"
    assert CellParams(device="cuda").process_group_backend == "nccl"
    assert CellParams(device="cuda", backend="gloo").process_group_backend == "gloo"


def cell(**changes):
    """A cell as the plan checks it: every CellParams field plus world_size."""
    return {**CellParams().as_dict(), "world_size": 2, "strategy": "ddp", **changes}


# Every combination the plan refuses (workflow: check_cell_combinations): the cell, the
# parameters named, a fragment of the reason. Each one the harness would refuse before or
# at the cell's first step (data.load, ShardedBatchSampler, pipeline's wrap and split).
REFUSED = {
    "strong-global-batch-over-dataset": (
        cell(batch_size=128, dataset_size=16), ("batch_size", "dataset_size"), "larger than its 16 training samples"
    ),
    "weak-global-batch-over-dataset": (
        cell(batch_size=64, scaling="weak", world_size=4, dataset_size=128),
        ("batch_size", "dataset_size"), "batch_size x world_size = 256",
    ),
    "single-batch-over-dataset": (
        cell(strategy="single", world_size=1, batch_size=65, dataset_size=64), ("batch_size", "dataset_size"), "65"
    ),
    "global-batch-below-world-size": (
        cell(batch_size=2, world_size=4), ("batch_size", "world_size"), "a rank would get no sample"
    ),
    "real-dataset-too-small": (
        cell(dataset="mnist", dataset_size=70_000), ("dataset", "dataset_size"), "60000 training samples of mnist"
    ),
    "pipeline-non-sequential-model": (
        cell(strategy="pipeline", model="resnet18"), ("strategy", "model"), "nn.Sequential"
    ),
    "pipeline-more-stages-than-layers": (
        cell(strategy="pipeline", model="mlp", world_size=8, batch_size=64), ("strategy", "model", "world_size"),
        "mlp has 6 layers",
    ),
    "pipeline-batch-not-split-by-micro-batches": (
        cell(strategy="pipeline", batch_size=30, micro_batches=4), ("batch_size", "micro_batches"), "4 equal micro-batches"
    ),
    "tf32-on-cpu": (cell(precision="tf32"), ("precision", "device"), "device cpu has no such mode"),
    "pipeline-accumulates-already": (
        cell(strategy="pipeline", grad_accum=2), ("grad_accum", "strategy"), "accumulates its micro_batches already"
    ),
    "pipeline-fp32-only": (cell(strategy="pipeline", precision="bf16"), ("precision", "strategy"), "fp32 only"),
    "micro-batch-would-be-empty": (
        cell(strategy="fsdp", batch_size=10, world_size=3, grad_accum=4), ("batch_size", "grad_accum"),
        "3 ranks x 4 micro-batches need at least 12 samples",
    ),
}  # fmt: skip


@pytest.mark.parametrize("values,names,fragment", REFUSED.values(), ids=REFUSED.keys())
def test_the_plan_refuses_cells_the_harness_cannot_train(values, names, fragment):
    with pytest.raises(CellConflict) as err:
        check_cell(values)
    assert err.value.names == names and isinstance(err.value, ParamError)
    assert fragment in str(err.value), str(err.value)


def test_refusals_name_the_cells_values():
    with pytest.raises(CellConflict) as err:
        check_cell(cell(batch_size=128, dataset_size=16, world_size=2))
    assert "batch_size=128, world_size=2, scaling=strong, dataset_size=16" in str(err.value)


@pytest.mark.parametrize(
    "values",
    [
        cell(),
        cell(batch_size=64, dataset_size=64),  # exactly one step per epoch
        cell(batch_size="auto", scaling="weak", dataset_size=16),  # auto: known only at run time
        cell(batch_size=2, world_size=2),  # one sample per rank
        cell(strategy="pipeline", batch_size=2, world_size=4, micro_batches=2),  # every stage reads the whole batch
        cell(strategy="pipeline", model="simple_cnn", world_size=10, batch_size=40),
        cell(dataset="imagenette", dataset_size=9469),
        # skipped by design (a row of the results, with the reason), whatever the batch:
        cell(strategy="ddp", world_size=1, batch_size=128, dataset_size=16),
        cell(strategy="single", world_size=2, batch_size=1, dataset_size=16),
        cell(strategy="pipeline", device="cuda", backend="gloo", model="resnet18"),
        cell(strategy="fsdp", batch_size=12, world_size=3, grad_accum=4, precision="bf16", optimizer="adamw"),
        cell(strategy="ddp", device="cuda", precision="tf32"),
        cell(strategy="local_sgd", precision="fp16", grad_accum=4),
        cell(strategy="pipeline", precision="fp32", optimizer="adamw"),
    ],
)  # fmt: skip
def test_cells_that_run_or_are_skipped_by_design_pass(values):
    check_cell(values)


def test_strategy_traits_read_from_source_match_the_strategies():
    pytest.importorskip("torch")
    from ddpbench import strategies
    from ddpbench.strategies.base import Strategy

    for name in strategy_names():
        s, traits = strategies.get(name), strategy_traits(name)
        assert (traits.min_world, traits.max_world, traits.point_to_point) == (s.min_world, s.max_world, s.point_to_point)
        assert traits.shards_per_rank == (type(s).data_shard is Strategy.data_shard), name
        assert traits.imports_dynamo == s.imports_dynamo, name
        for world in (1, 2, 3, 64):
            assert traits.unsupported(world) == bool(s.unsupported(world)), (name, world)
    assert not strategy_traits(PIPELINE).shards_per_rank


@pytest.mark.slow
def test_the_torchvision_models_are_those_built_by_torchvision(monkeypatch):
    """core.params.TORCHVISION_MODELS (the launcher's zygote imports torchvision.models for them)."""
    pytest.importorskip("torchvision")
    from ddpbench.core.params import TORCHVISION_MODELS
    from ddpbench.run import models

    calls = []
    real = models._torchvision_models
    monkeypatch.setattr(models, "_torchvision_models", lambda: calls.append(1) or real())
    for name in IMAGE_MODELS:
        calls.clear()
        models.build(name, (3, 8, 8), 10)
        assert bool(calls) == (name in TORCHVISION_MODELS), name


@pytest.mark.slow
def test_sequential_models_and_their_layers_match_the_models():
    pytest.importorskip("torch")
    from torch import nn

    from ddpbench.run import models

    for name in MODELS:
        model = models.build(name, (3, 32, 32), 10) if name in IMAGE_MODELS else models.build(name, (16,), 10, kind="tokens")
        if isinstance(model, nn.Sequential):
            assert SEQUENTIAL_LAYERS.get(name) == len(model), name
        else:
            assert name not in SEQUENTIAL_LAYERS
