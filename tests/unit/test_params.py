import argparse

import pytest

from ddpbench.params import CellParams, ParamError, check_values, strategy_names


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
