"""The strategy registry and the pieces of the explicit strategies (no process groups)."""

import copy

import pytest
import torch

from ddpbench import strategies
from ddpbench.strategies.base import BucketedSum, Strategy, allreduce_bytes, buckets, gradients

EXPECTED = {
    "single", "gather_scatter", "allreduce", "bucketed_allreduce", "ring_allreduce", "ddp",
    "ddp_fp16", "powersgd", "local_sgd", "pipeline", "zero",
}  # fmt: skip


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


@pytest.mark.parametrize("cap_bytes", [1200, 4000, 25 * 2**20])
def test_buckets_are_formed_as_ddp_forms_them(cap_bytes):
    """One meaning of bucket_mb for every strategy: the hand bucketing groups gradients
    exactly as DDP's reducer does with bucket_cap_mb (reverse order, a bucket closes once
    it reaches the cap), so bucketed_allreduce and ddp make the same calls."""
    import torch.distributed as dist

    ts = [torch.zeros(n) for n in (100, 200, 300, 5000, 10, 7, 900)]  # float32: 4 bytes each
    ours = [[id(t) for t in g] for g in buckets(ts, bucket_mb=cap_bytes / 2**20)]
    rev = list(reversed(ts))
    theirs, _ = dist._compute_bucket_assignment_by_size(rev, [cap_bytes])
    assert ours == [[id(rev[i]) for i in bucket] for bucket in theirs]


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


def test_pipeline_ideal_bubble_and_balanced_cuts():
    from ddpbench.strategies.pipeline import cut_points, ideal_bubble_fraction, layer_costs

    assert ideal_bubble_fraction(2, 4) == pytest.approx(1 / 5)
    assert ideal_bubble_fraction(4, 1) == pytest.approx(3 / 4)
    assert ideal_bubble_fraction(1, 8) == 0
    assert cut_points([0, 10, 0, 10, 0, 10, 0, 10], 2) == [0, 4]
    assert cut_points([100, 1, 1, 1], 3) == [0, 1, 2]  # every stage gets a layer
    mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    assert layer_costs(mlp, torch.zeros(1, 3, 2, 2)) == [0, 60, 0, 10]
    with pytest.raises(ValueError, match="layers"):
        cut_points([1, 1], 3)


def test_pipeline_refuses_models_without_a_layer_order():
    from types import SimpleNamespace

    from ddpbench.run.models import build

    ctx = SimpleNamespace(params=SimpleNamespace(model="resnet18"))
    with pytest.raises(ValueError, match="nn.Sequential"):
        strategies.get("pipeline").wrap(build("resnet18", (3, 32, 32), 10), ctx)


def test_world_size_bounds_are_inclusive_and_named():
    """min_world and max_world are both allowed; the message names the bounds and the world."""

    class Two(Strategy):
        name, min_world, max_world = "two", 2, 4

    class Open(Strategy):
        name, min_world = "open", 2

    assert [Two().unsupported(w) for w in (2, 3, 4)] == [None, None, None]
    assert Two().unsupported(1) == "strategy two needs a world size >= 2 and <= 4, got 1"
    assert Two().unsupported(5) == "strategy two needs a world size >= 2 and <= 4, got 5"
    assert Open().unsupported(2) is None and Open().unsupported(1000) is None
    assert Open().unsupported(1) == "strategy open needs a world size >= 2, got 1"


def _floats(*counts):
    return [torch.zeros(n) for n in counts]  # float32: 4 bytes per element


@pytest.mark.parametrize(
    "counts, cap_bytes, expected",
    [
        # reverse order; a bucket closes once it holds >= the cap: 4+4=8 < 9, +4 = 12 >= 9
        ((1, 1, 1, 1, 1, 1), 9, [[5, 4, 3], [2, 1, 0]]),
        # exactly the cap closes it (8 >= 8); one oversized tensor is a bucket of its own
        ((1, 1, 10, 1, 1), 8, [[4, 3], [2], [1, 0]]),
        # a remainder below the cap is the last bucket: 12 < 16
        ((1, 1, 1), 16, [[2, 1, 0]]),
        ((1, 1, 1), 4, [[2], [1], [0]]),
    ],
)
def test_buckets_by_hand(counts, cap_bytes, expected):
    ts = _floats(*counts)
    got = [[next(i for i, t in enumerate(ts) if t is g) for g in group] for group in buckets(ts, cap_bytes / 2**20)]
    assert got == expected


def test_bucket_cap_is_in_mebibytes():
    ts = _floats(2**18, 2**18, 2**18)  # 1 MiB each
    assert [len(g) for g in buckets(ts, 2.0)] == [2, 1]
    assert [len(g) for g in buckets(ts, 1.0)] == [1, 1, 1]


def test_bucketed_sum_averages_lone_and_joined_buckets_in_place():
    """Rank 0 holds g, the other rank all ones: the average is (g + 1) / 2, worked by hand,
    and each element must come back to its own place, from lone tensors (reduced in place)
    and from one joined bucket (copied back)."""
    from types import SimpleNamespace

    class OtherRankHoldsOnes(BucketedSum):
        name = "ones"

        def reduce_sum_(self, flat, ctx):
            flat.add_(1.0)

    for cap_bytes in (4, 10**6):  # lone tensors, then one joined bucket
        model = torch.nn.Linear(2, 2)
        model.weight.grad = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        model.bias.grad = torch.tensor([10.0, 20.0])
        ctx = SimpleNamespace(world=2, params=SimpleNamespace(bucket_mb=cap_bytes / 2**20))
        OtherRankHoldsOnes().sync_gradients(model, ctx)
        assert model.weight.grad.tolist() == [[1.0, 1.5], [2.0, 2.5]]
        assert model.bias.grad.tolist() == [5.5, 10.5]


def test_gradients_keep_existing_ones_and_skip_frozen_parameters():
    model = torch.nn.Linear(2, 1)
    model.weight.grad = torch.tensor([[5.0, 6.0]])
    model.bias.requires_grad_(False)
    (grad,) = gradients(model)
    assert grad.tolist() == [[5.0, 6.0]] and model.bias.grad is None


def test_allreduce_bytes_by_hand():
    # 2 (p - 1) / p of the message: p = 4 -> 1.5x, p = 8 -> 1.75x; rounded to a whole byte
    assert allreduce_bytes(1000, 4) == 1500
    assert allreduce_bytes(1000, 8) == 1750
    assert allreduce_bytes(10, 3) == 13  # 40 / 3 = 13.33


def test_nbytes_and_optimizer_state_bytes():
    from ddpbench.strategies.base import nbytes, state_bytes

    assert nbytes(torch.zeros(3, dtype=torch.float64)) == 24
    assert nbytes(torch.zeros(2, 5, dtype=torch.float16)) == 20
    model = torch.nn.Linear(3, 2)  # 6 + 2 parameters
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert state_bytes(opt) == 0  # no momentum buffer before the first step
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    assert state_bytes(opt) == 8 * 4  # one float32 momentum buffer per parameter
    assert Strategy().optimizer_state_bytes(opt) == 32


@pytest.mark.parametrize("momentum", [0.9, 0.0])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_the_harness_sgd_steps_as_torch_optim_sgd_bit_for_bit(momentum, set_to_none):
    """strategies.base.SGD (torch's functional sgd, without torch.optim.Optimizer, whose
    first use imports torch._dynamo) leaves the same parameters and momentum buffers as
    torch.optim.SGD, exactly, step after step; a parameter without a gradient is left alone."""
    from ddpbench.strategies.base import SGD, state_bytes

    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3), torch.nn.Linear(3, 3))
    theirs = copy.deepcopy(ours)
    for model in (ours, theirs):
        model[3].requires_grad_(False)  # never gets a gradient
    opt_ours = SGD(ours.parameters(), lr=0.05, momentum=momentum)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=momentum)
    for step in range(4):
        x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
        for a, b in zip(ours.parameters(), theirs.parameters()):
            assert torch.equal(a, b) and (a.grad is None) == (b.grad is None)
            assert a.grad is None or torch.equal(a.grad, b.grad)
        assert state_bytes(opt_ours) == state_bytes(opt_theirs)
        for a, b in zip(ours.parameters(), theirs.parameters()):
            mine, torchs = opt_ours.state.get(a, {}), opt_theirs.state.get(b, {})
            assert (mine.get("momentum_buffer") is None) == (torchs.get("momentum_buffer") is None)
            if mine.get("momentum_buffer") is not None:
                assert torch.equal(mine["momentum_buffer"], torchs["momentum_buffer"])


@pytest.mark.parametrize("name", strategies.names())
def test_settings_list_exactly_the_strategy_settings_the_strategy_reads(name):
    """SETTINGS decides what the workflow reruns and repeats: a setting the code reads but
    SETTINGS omits would be silently held at its default; one listed but never read would
    rerun a strategy for nothing. Read = named as `params.<setting>` in the strategy's
    module or in any method its class resolves to (inherited ones included)."""
    import importlib
    import inspect
    import re

    from ddpbench.strategies import STRATEGY_SETTINGS, strategy_settings

    module = importlib.import_module(f"ddpbench.strategies.{name}")
    cls = type(module.STRATEGY)
    sources = [inspect.getsource(module)]
    for attr in dir(cls):
        member = inspect.getattr_static(cls, attr)
        func = getattr(member, "__func__", member)
        if inspect.isfunction(func) and func.__module__.startswith("ddpbench."):
            sources.append(inspect.getsource(func))
    read = {s for s in STRATEGY_SETTINGS if any(re.search(rf"params\.{s}\b", src) for src in sources)}
    assert set(strategy_settings(name)) == read


def test_the_reference_of_the_sharded_strategies_is_a_registered_replicated_one():
    """strategies.REFERENCE (what the memory analysis and the sharding and language-model answers
    measure the sharded strategies against) is named once, in the registry, and holds everything."""
    from ddpbench import strategies

    assert strategies.REFERENCE in strategies.names()
    assert strategies.strategy_traits(strategies.REFERENCE).sharding == "replicated"
    assert strategies.REFERENCE not in strategies.sharded()
