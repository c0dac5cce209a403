"""The strategy registry and the pieces of the explicit strategies (no process groups)."""

import pytest
import torch

from ddpbench import strategies
from ddpbench.strategies.base import BucketedSum, Strategy, allreduce_bytes, buckets, gradients

EXPECTED = {"single", "gather_scatter", "allreduce", "bucketed_allreduce", "ring_allreduce", "ddp"}


def test_registry_lists_every_module_but_base():
    names = set(strategies.names())
    assert EXPECTED <= names and "base" not in names


@pytest.mark.parametrize("name", strategies.names())
def test_every_module_registers_its_strategy(name):
    strategy = strategies.get(name)
    assert isinstance(strategy, Strategy) and strategy.name == name


def test_unknown_strategy_names_the_registered_ones():
    with pytest.raises(ValueError, match="ddp"):
        strategies.get("nope")


def test_world_sizes():
    assert strategies.get("single").unsupported(1) is None
    assert "world size" in strategies.get("single").unsupported(2)
    for name in EXPECTED - {"single"}:
        assert strategies.get(name).unsupported(1) and strategies.get(name).unsupported(3) is None


def test_buckets_respect_the_size_limit_and_keep_order():
    ts = [torch.zeros(n) for n in (100, 200, 300, 5000, 10)]  # float32: 4 bytes each
    groups = list(buckets(ts, bucket_mb=1200 / 2**20))
    assert [[t.numel() for t in g] for g in groups] == [[100, 200], [300], [5000], [10]]
    assert [t for g in groups for t in g] == ts


class _Doubling(BucketedSum):
    """A fake two-rank sum: both ranks hold the same gradient, so the sum doubles it."""

    name = "doubling"

    def reduce_sum_(self, flat, ctx):
        flat.mul_(2)


def test_bucketed_sum_averages_and_writes_back():
    from types import SimpleNamespace

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model(torch.randn(5, 4)).sum().backward()
    before = [g.clone() for g in gradients(model)]
    ctx = SimpleNamespace(world=2, params=SimpleNamespace(bucket_mb=40 / 2**20))  # several buckets
    _Doubling().sync_gradients(model, ctx)
    for a, b in zip(gradients(model), before):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_missing_gradients_become_zeros():
    model = torch.nn.Linear(2, 2)
    assert all(g.eq(0).all() for g in gradients(model))


def test_allreduce_bytes_is_the_ring_volume():
    assert allreduce_bytes(1000, 1) == 0
    assert allreduce_bytes(1000, 2) == 1000
    assert allreduce_bytes(900, 3) == 1200
