"""The model catalog (catalog.json, docs/models.md) is what the model objects are."""

import pytest

from ddpbench.core.params import IMAGE_MODELS, TOKEN_MODELS
from ddpbench.plan import catalog
from ddpbench.run import models


def test_every_registered_model_is_listed_for_every_input():
    listed = {(r["model"], r["input"]) for r in catalog.load()["models"]}
    assert listed == {(m, i) for m in IMAGE_MODELS for i in catalog.INPUTS} | {
        (m, catalog.TOKEN_INPUT) for m in TOKEN_MODELS
    }


@pytest.mark.parametrize("model", TOKEN_MODELS)
def test_token_rows_match_the_gpt_objects_and_scale_with_the_sequence(model):
    import torch

    row = next(r for r in catalog.load()["models"] if (r["model"], r["input"]) == (model, catalog.TOKEN_INPUT))
    (seq_len,), vocab = catalog.input_shape(catalog.TOKEN_INPUT)
    with torch.device("meta"):
        built = models.build(model, (seq_len,), vocab, kind="tokens")
    assert row["parameters"] == models.count_parameters(built) and row["gradient_bytes"] == 4 * row["parameters"]
    assert catalog.forward_flops(model, catalog.TOKEN_INPUT, seq_len=4 * seq_len) == 4 * row["forward_flops_per_sample"]


@pytest.mark.parametrize("model", IMAGE_MODELS)
@pytest.mark.parametrize("input_name", ["cifar10", "mnist"])
def test_parameter_and_gradient_counts_match_the_model_objects(model, input_name):
    row = next(r for r in catalog.load()["models"] if (r["model"], r["input"]) == (model, input_name))
    shape, classes = catalog.input_shape(input_name)
    built = models.build(model, shape, classes)
    assert row["parameters"] == models.count_parameters(built)
    assert row["gradient_bytes"] == sum(p.numel() * p.element_size() for p in built.parameters() if p.requires_grad)
    assert row["shape"] == list(shape)


def test_flops_are_counted_from_the_forward_pass():
    row = catalog.measure("mlp", "mnist")
    # Linear layers: 2 x in x out multiply-adds per sample
    assert row["forward_flops_per_sample"] == 2 * (784 * 512 + 512 * 256 + 256 * 10)
    assert row == next(r for r in catalog.load()["models"] if (r["model"], r["input"]) == ("mlp", "mnist"))


def test_docs_show_the_current_catalog():
    assert catalog.markdown(catalog.load()) in catalog.DOCS_PATH.read_text()
    assert catalog.gradient_bytes("simple_cnn", "cifar10") == 4 * 545_098
    assert catalog.gradient_bytes("simple_cnn", "nope") is None


def test_the_strategies_column_is_the_registrys():
    from ddpbench import strategies

    # each strategy declares how it keeps the model (base.Strategy.sharding); the registry answers
    layouts = {name: catalog.sharding(name) for name in strategies.names()}
    assert {n: k for n, k in layouts.items() if k != "replicated"} == {
        "zero": "zero1", "fsdp_grad_op": "zero2", "fsdp": "zero3", "pipeline": "stages"}
    assert strategies.sharded() == ("zero", "fsdp_grad_op", "fsdp") and catalog.sharding("no_such") == "replicated"
    for model, text in catalog.load()["strategies"].items():
        assert text == catalog.strategies_for(model), "stale: run `ddpbench models --write`"


def test_optimizer_state_and_what_a_rank_holds_follow_the_sharding():
    p = catalog.gradient_bytes("mlp", "mnist")  # 535,818 fp32 parameters
    assert catalog.optimizer_state_bytes(p, "sgd") == p and catalog.optimizer_state_bytes(p, "adamw") == 2 * p
    assert catalog.optimizer_state_bytes(p, "sgd", momentum=0.0) == 0

    def held(strategy, world, optimizer="adamw"):
        return catalog.held_bytes("mlp", "mnist", strategy, world, optimizer)

    assert held("ddp", 4) == {"parameters": p, "gradients": p, "optimizer": 2 * p, "total": 4 * p}
    assert held("single", 1, "sgd")["total"] == held("local_sgd", 3, "sgd")["total"] == 3 * p
    shard = -(-p // 4)
    assert held("zero", 4) == {"parameters": p, "gradients": p, "optimizer": 2 * shard, "total": 2 * p + 2 * shard}
    for strategy in ("fsdp", "fsdp_grad_op"):  # both hold shards between steps
        assert held(strategy, 4) == {"parameters": shard, "gradients": shard, "optimizer": 2 * shard, "total": 4 * shard}
    assert held("fsdp", 1) == held("ddp", 1)
    assert held("pipeline", 2) is None and catalog.held_bytes("mlp", "nope", "ddp", 2) is None


def test_models_prints_what_each_rank_holds_at_a_world_size(capsys):
    assert catalog.main(["--world-size", "4", "--optimizer", "adamw"]) == 0
    out = capsys.readouterr().out
    assert "Held per rank at p = 4 with adamw" in out
    p = catalog.gradient_bytes("mlp", "mnist")
    row = next(line for line in out.splitlines() if line.startswith("| `mlp` | mnist |") and line.count("|") == 6)
    assert row.split("|")[3:6] == [f" {4 * p / 2**20:.2f} ", f" {(2 * p + 2 * -(-p // 4)) / 2**20:.2f} ", f" {4 * -(-p // 4) / 2**20:.2f} "]
