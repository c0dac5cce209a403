"""fp16's dynamic loss scale (run.precision.LossScaler) and gradient accumulation's split of
a rank's batch (run.loop.accumulate), in one process."""

import pytest
import torch
from torch import nn

from ddpbench.core import timers
from ddpbench.core.params import CellParams
from ddpbench.run.loop import accumulate
from ddpbench.run.precision import LossScaler
from ddpbench.strategies import get
from ddpbench.strategies.base import Context


def model_with_grads(*grads):
    m = nn.Linear(len(grads), 1, bias=False)
    m.weight.grad = torch.tensor([list(grads)])
    return m


def test_disabled_scaler_is_one_and_never_skips():
    s = LossScaler(False)
    m = model_with_grads(float("inf"))
    assert s.scale == 1.0 and s.unscale(m, agree=False)
    assert torch.isinf(m.weight.grad).all()  # untouched: no check, no division


def test_scaler_unscales_good_gradients_and_grows_after_the_interval():
    s = LossScaler(True, init=8.0, interval=2)
    m = model_with_grads(8.0, 16.0)
    assert s.unscale(m, agree=False)
    assert m.weight.grad.tolist() == [[1.0, 2.0]] and s.scale == 8.0
    m = model_with_grads(8.0, 8.0)
    assert s.unscale(m, agree=False) and s.scale == 16.0 and s.good_steps == 0


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_scaler_skips_an_overflowing_step_and_backs_off(bad):
    s = LossScaler(True, init=1024.0, interval=2)
    assert s.unscale(model_with_grads(1.0), agree=False)
    assert not s.unscale(model_with_grads(1.0, bad), agree=False)
    assert s.scale == 512.0 and s.skipped == 1 and s.good_steps == 0


def ctx_for(**changes):
    params = CellParams(**{"strategy": "single", **changes})
    return Context(params, 0, 1, torch.device("cpu"), timers.CommMeter(), timers.Clock("cpu"), instrument=False)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_accumulated_micro_batches_give_the_full_batch_gradient_and_loss(k):
    torch.manual_seed(0)
    x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    full, acc = nn.Linear(6, 3), nn.Linear(6, 3)
    acc.load_state_dict(full.state_dict())
    strategy = get("single")
    timer = timers.StepTimer(timers.Clock("cpu"), enabled=False)
    loss1, correct1 = accumulate(full, strategy, ctx_for(), x, y, 10, 1.0, timer)
    lossk, correctk = accumulate(acc, strategy, ctx_for(grad_accum=k), x, y, 10, 1.0, timer)
    assert float(lossk) == pytest.approx(float(loss1), rel=1e-6) and int(correctk) == int(correct1)
    for a, b in zip(acc.parameters(), full.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)


def test_a_rank_with_fewer_samples_than_micro_batches_is_refused_by_name():
    timer = timers.StepTimer(timers.Clock("cpu"), enabled=False)
    with pytest.raises(ValueError, match="grad_accum 4 needs at least 4 samples per rank"):
        accumulate(nn.Linear(2, 2), get("single"), ctx_for(grad_accum=4), torch.randn(3, 2), torch.zeros(3, dtype=torch.long), 3, 1.0, timer)


def test_loss_scale_multiplies_the_gradients():
    torch.manual_seed(0)
    x, y = torch.randn(4, 3), torch.randint(0, 2, (4,))
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    timer = timers.StepTimer(timers.Clock("cpu"), enabled=False)
    accumulate(a, get("single"), ctx_for(), x, y, 4, 1.0, timer)
    accumulate(b, get("single"), ctx_for(), x, y, 4, 256.0, timer)
    torch.testing.assert_close(b.weight.grad, 256.0 * a.weight.grad)


def test_autocast_runs_the_forward_in_the_cells_precision():
    layer = nn.Linear(4, 4)
    with ctx_for(precision="bf16").autocast():
        assert layer(torch.randn(2, 4)).dtype == torch.bfloat16
    with ctx_for().autocast():
        assert layer(torch.randn(2, 4)).dtype == torch.float32
