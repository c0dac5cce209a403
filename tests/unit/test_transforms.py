"""run.transforms: activation checkpointing and compile applied per block, in place, keeping the
state dict's names, surviving a deep copy, with the compiler's stances around the timed steps.
(Compiled training end to end, every strategy: tests/integration/test_compile.py.)"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ddpbench.core.params import CellParams, ParamError
from ddpbench.run import transforms


class Block(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.a, self.b = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), Block(), Block(), nn.Linear(8, 3))


def train_two_steps(m: nn.Module) -> dict[str, torch.Tensor]:
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1, 2])
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.fixture
def quick_compile(monkeypatch):
    """dynamo and AOTAutograd without inductor's code generation: the composition, in seconds."""
    monkeypatch.setenv(transforms.BACKEND_ENV, "aot_eager")
    yield
    torch.compiler.reset()
    torch.compiler.set_stance("default")


@pytest.mark.parametrize(("mode", "expected"), [("none", []), ("full", [0, 1, 2, 3, 4]), ("selective", [0, 2, 4])])
def test_which_blocks_are_recomputed(mode, expected):
    assert transforms.checkpointed_blocks(CellParams(activation_checkpointing=mode), 5) == expected


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_checkpointing_changes_no_result_and_keeps_the_names(mode):
    plain, checkpointed = model(), model()
    record = transforms.apply(checkpointed, CellParams(activation_checkpointing=mode))
    assert record == {"blocks": 5, "checkpointed_blocks": 5 if mode == "full" else 3, "compiled_blocks": 0,
                      "compiled_loss": False, "compile_backend": None, "converted": ""}  # fmt: skip
    assert list(checkpointed.state_dict()) == list(plain.state_dict())
    ours, ref = train_two_steps(checkpointed), train_two_steps(plain)
    assert all(torch.equal(ours[k], ref[k]) for k in ref)


class NormBlock(nn.Module):
    """A block with running state: BatchNorm's mean, variance and batch count."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.a, self.norm = nn.Linear(d, d), nn.BatchNorm1d(d)

    def forward(self, x):
        return x + torch.relu(self.norm(self.a(x)))


def norm_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(NormBlock(), NormBlock(), NormBlock(), nn.Linear(8, 3))


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_checkpointing_leaves_running_statistics_as_the_eager_twin_does(mode):
    """Issue 68: the recompute ran BatchNorm's forward a second time in the backward, so its running
    statistics moved twice a step (num_batches_tracked 2 after one step, the mean off): the eval
    loss and a replay differed from the eager twin. They are exactly the eager twin's now."""
    plain, checkpointed = norm_model(), norm_model()
    transforms.apply(checkpointed, CellParams(activation_checkpointing=mode))
    ours, ref = train_two_steps(checkpointed), train_two_steps(plain)
    assert ours["0.norm.num_batches_tracked"].item() == 2
    assert all(torch.equal(ours[k], ref[k]) for k in ref), [k for k in ref if not torch.equal(ours[k], ref[k])]


def test_a_compiled_checkpointed_block_updates_its_running_statistics_once(quick_compile):
    plain, compiled = norm_model(), norm_model()
    transforms.apply(compiled, CellParams(compile="model", activation_checkpointing="full"))
    ours, ref = train_two_steps(compiled), train_two_steps(plain)
    assert ours["0.norm.num_batches_tracked"].item() == 2
    assert all(torch.allclose(ours[k].float(), ref[k].float(), rtol=1e-5, atol=1e-6) for k in ref)


def test_the_recompute_puts_back_only_the_buffers_it_changed():
    block = NormBlock()
    block.register_buffer("mask", torch.ones(8))
    versions = {name: b._version for name, b in block.named_buffers()}
    with transforms.running_state_kept(block):
        block(torch.randn(4, 8))
        block.mask.mul_(1)  # written, same value: left as it is
    assert block.norm.num_batches_tracked.item() == 0 and torch.equal(block.norm.running_mean, torch.zeros(8))
    assert block.mask._version == versions["mask"] + 1  # not written a second time


def test_the_recompute_is_counted_only_in_the_hardware_flops():
    from torch.utils.flop_counter import FlopCounterMode

    m = model()
    transforms.apply(m, CellParams(activation_checkpointing="full"))
    x = torch.randn(4, 8)

    def flops() -> int:
        with FlopCounterMode(display=False) as counter:
            m(x).sum().backward()
        return counter.get_total_flops()

    hardware = flops()
    with transforms.without_recompute():
        model_flops = flops()
    # each Block's first Linear runs again in the backward (its output feeds tanh); the second's
    # output is not needed (checkpointing stops early), nor is the plain last Linear's
    recompute = 4 * 2 * 4 * 8 * 16
    assert hardware == model_flops + recompute


def test_compiled_blocks_train_as_eager_ones_and_a_deep_copy_stays_its_own(quick_compile):
    plain, compiled = model(), model()
    record = transforms.apply(compiled, CellParams(compile="model", activation_checkpointing="selective"))
    assert record["compiled_blocks"] == 5 and record["compile_backend"] == "aot_eager"
    assert list(compiled.state_dict()) == list(plain.state_dict())
    twin = copy.deepcopy(compiled)  # the replay's initial model, FSDP's skeleton
    assert twin[0].forward.__self__ is twin[0] and compiled[0].forward.__self__ is compiled[0]
    ours, ref = train_two_steps(compiled), train_two_steps(plain)
    assert all(torch.allclose(ours[k], ref[k], rtol=1e-5, atol=1e-7) for k in ref)
    assert transforms.compiled_graphs() >= 1
    with torch.no_grad():
        twin_out = twin(torch.ones(2, 8))
    assert not torch.equal(twin_out, compiled(torch.ones(2, 8)).detach())  # the copy kept its own (untrained) weights


def test_a_recompile_in_the_timed_steps_fails_and_eager_never_compiles(quick_compile):
    params = CellParams(compile="model")
    m = model()
    transforms.apply(m, params)
    m(torch.randn(4, 8)).sum().backward()  # the untimed first step compiles
    transforms.timed_steps(params)
    try:
        m(torch.randn(4, 8)).sum().backward()  # the same shapes: no recompile
        with pytest.raises(Exception, match="(?i)recompil"):
            m(torch.randn(5, 8))  # another batch size: a new graph
    finally:
        transforms.untimed(params)
    graphs = transforms.compiled_graphs()
    with transforms.eager(params), torch.no_grad():
        m.eval()(torch.randn(3, 8))  # eval mode and a new shape: would recompile, runs eager
    assert transforms.compiled_graphs() == graphs


@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 7)])
def test_a_compiled_cells_loss_is_compiled_and_equals_the_eager_one(quick_compile, shape):
    """compile: model compiles the loss with the blocks (the logits' fp32 copy and log-softmax fused,
    issue 71); its value and its gradient are the eager task_loss's, for a classifier's (N, K)
    logits and a language model's (N, T, V)."""
    from ddpbench.strategies.base import task_loss

    assert transforms.loss(CellParams()) is task_loss
    compiled = transforms.loss(CellParams(compile="model"))
    assert compiled is not task_loss
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(*shape, generator=gen)
    y = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    before = transforms._dynamo_graphs() or 0
    ours, ref = compiled(a, y), task_loss(b, y)
    ours.backward(), ref.backward()
    assert (transforms._dynamo_graphs() or 0) > before  # dynamo compiled it: not the eager function behind a wrapper
    assert torch.allclose(ours, ref, rtol=1e-6) and torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-8)


def test_the_axes_take_only_their_values():
    with pytest.raises(ParamError, match="memory_format"):
        CellParams(memory_format="nhwc")
    with pytest.raises(ParamError, match="compile"):
        CellParams(compile="max-autotune")
    with pytest.raises(ParamError, match="activation_checkpointing"):
        CellParams(activation_checkpointing="every")


def test_the_seam_checkpoints_then_compiles_each_block_then_wraps(quick_compile, monkeypatch):
    """The model-transform seam: BLOCK_STEPS in their order (the compiled forward is the
    checkpointed one), then the strategy's wrap around the transformed model; the copy kept for
    the replay is transformed but not wrapped."""
    assert [name for name, _ in transforms.BLOCK_STEPS] == ["activation_checkpointing", "compile"]
    order = []
    for i, (name, step_of) in enumerate(transforms.BLOCK_STEPS):

        def logged(params, index, n, name=name, step_of=step_of):
            step = step_of(params, index, n)
            return None if step is None else (lambda f, step=step, name=name: order.append(name) or step(f))

        monkeypatch.setattr(transforms, "BLOCK_STEPS", transforms.BLOCK_STEPS[:i] + ((name, logged),) + transforms.BLOCK_STEPS[i + 1 :])
    params = CellParams(activation_checkpointing="selective", compile="model")
    plain, m = model(), model()
    prepared = transforms.wrapped(m, transforms.apply(m, params), lambda inner: nn.Sequential(inner), keep_unwrapped=True)
    assert order[:2] == ["activation_checkpointing", "compile"] and order.count("compile") == 5
    assert prepared.record["checkpointed_blocks"] == 3 and prepared.record["compiled_blocks"] == 5
    assert isinstance(prepared.model, nn.Sequential) and prepared.model[0] is m
    assert prepared.unwrapped is not m and not isinstance(prepared.unwrapped[0], nn.Sequential)
    with transforms.eager(params):
        for got, want in zip(train_two_steps(prepared.unwrapped).values(), train_two_steps(plain).values()):
            torch.testing.assert_close(got, want)
    assert transforms.wrapped(model(), {}, lambda inner: inner, keep_unwrapped=False).unwrapped is None


def small_cnn() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 4))  # fmt: skip


def train_cnn(m: nn.Module, params: CellParams, steps: int = 3) -> dict[str, torch.Tensor]:
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = transforms.to_device(torch.randn(6, 3, 12, 12, generator=g), torch.randint(0, 4, (6,), generator=g),
                                    torch.device("cpu"), params)  # fmt: skip
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def test_channels_last_converts_the_model_and_every_batch_and_trains_as_contiguous_does():
    """Issue 70, item 3: a whole-model converter (MODEL_CONVERTERS, before the block steps) with
    channels_last its first user: the convolution weights and each batch in NHWC, the names and
    values of the state dict unchanged, three steps of training equal to the contiguous twin's
    (the same arithmetic in another kernel: to float32 rounding)."""
    last, plain = CellParams(memory_format="channels_last"), CellParams()
    assert [name for name, _ in transforms.MODEL_CONVERTERS] == ["memory_format"] and transforms.converters(plain) == ()
    a, b = small_cnn(), small_cnn()
    record = transforms.apply(b, last)
    assert record["converted"] == "memory_format" and transforms.apply(small_cnn(), plain)["converted"] == ""
    assert b[0].weight.is_contiguous(memory_format=torch.channels_last) and not b[0].weight.is_contiguous()
    x, _ = transforms.to_device(torch.randn(2, 3, 5, 5), torch.zeros(2), torch.device("cpu"), last)
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    flat, _ = transforms.to_device(torch.randn(2, 7), torch.zeros(2), torch.device("cpu"), last)
    assert flat.is_contiguous()  # only 4-d batches have a channel layout
    ours, theirs = train_cnn(b, last), train_cnn(a, plain)
    assert ours.keys() == theirs.keys()
    for k in theirs:
        torch.testing.assert_close(ours[k], theirs[k], rtol=1e-5, atol=1e-6, msg=k)


def test_a_token_model_reads_no_memory_format():
    """The layout has no 4-d tensor to act on in a token model: two such cells that differ only
    there are one measurement (core.params.effective_params)."""
    from ddpbench.core.params import effective_params

    token = {"strategy": "ddp", "dataset": "synthetic_tokens", "model": "gpt_tiny", "memory_format": "channels_last"}
    assert effective_params(token)["memory_format"] == "contiguous"
    image = {"strategy": "ddp", "dataset": "synthetic", "model": "resnet18", "memory_format": "channels_last"}
    assert effective_params(image)["memory_format"] == "channels_last"


def test_a_fully_sharded_strategy_refuses_channels_last_before_any_run():
    """FSDP2's fully_shard refuses a non-contiguous parameter (torch 2.15: "FSDP does not support
    non-contiguous parameters yet"), and channels_last convolution weights are: the plan refuses the
    cell naming both keys, instead of a rank failing at its wrap."""
    from ddpbench.core.params import CellConflict, check_training_setup

    for strategy in ("fsdp", "fsdp_grad_op"):
        with pytest.raises(CellConflict, match="memory_format.*contiguous"):
            check_training_setup({"strategy": strategy, "device": "cpu", "memory_format": "channels_last"})
    check_training_setup({"strategy": "zero", "device": "cpu", "memory_format": "channels_last"})
    check_training_setup({"strategy": "fsdp", "device": "cpu", "memory_format": "contiguous"})
