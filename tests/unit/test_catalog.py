"""The model catalog (catalog.json, docs/models.md) is what the model objects are."""

import pytest

from ddpbench.plan import catalog
from ddpbench.run import models


def test_every_registered_model_is_listed_for_every_input():
    listed = {(r["model"], r["input"]) for r in catalog.load()["models"]}
    assert listed == {(m, i) for m in models._BUILDERS for i in catalog.INPUTS}


@pytest.mark.parametrize("model", list(models._BUILDERS))
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
