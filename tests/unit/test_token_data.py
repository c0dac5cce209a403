"""synthetic_tokens (a fixed random Markov chain), the token loss and accuracy, and the
plan's checks of models against data."""

import math

import pytest
import torch

from ddpbench.core.params import CellConflict, CellParams, ParamError, check_cell, effective_params, is_user_model
from ddpbench.run import data
from ddpbench.strategies.base import task_correct, task_loss


def test_sequences_are_the_chain_shifted_by_one_and_seeded():
    ds = data.synthetic_tokens(vocab_size=50, seq_len=20, n=300, seed=1)
    assert ds.x.shape == ds.y.shape == (300, 20) and ds.x.dtype == ds.y.dtype == torch.long
    assert torch.equal(ds.x[:, 1:], ds.y[:, :-1])  # targets are the next tokens
    again = data.synthetic_tokens(vocab_size=50, seq_len=20, n=300, seed=1)
    assert torch.equal(ds.x, again.x) and not torch.equal(ds.x, data.synthetic_tokens(50, 20, 300, seed=2).x)
    assert 0 <= int(ds.x.min()) and int(ds.x.max()) < 50


def test_each_token_has_few_successors_so_there_is_something_to_learn():
    ds = data.synthetic_tokens(vocab_size=40, seq_len=64, n=400, seed=0)
    followers = {}
    for a, b in zip(ds.x.flatten().tolist(), ds.y.flatten().tolist()):
        followers.setdefault(a, set()).add(b)
    assert max(len(s) for s in followers.values()) <= data.SUCCESSORS
    assert len(followers) > 20  # the chain visits much of the vocabulary


def test_load_gives_token_data_of_the_cell():
    params = CellParams(model="gpt_tiny", dataset="synthetic_tokens", vocab_size=30, seq_len=12, dataset_size=40, test_size=8)
    d = data.load(params)
    assert d.kind == "tokens" and d.shape == (12,) and d.classes == 30
    assert len(d.train) == 40 and len(d.test) == 8
    assert data.load(CellParams()).kind == "image"


def test_token_loss_is_the_mean_over_positions_and_accuracy_counts_tokens():
    out = torch.zeros(2, 4, 5)
    out[0, :, 1] = 10.0  # sample 0 predicts token 1 everywhere
    y = torch.tensor([[1, 1, 2, 3], [0, 0, 0, 0]])
    assert float(task_correct(out, y)) == pytest.approx(0.5 + 1.0)  # half of sample 0; sample 1: ties pick token 0, all right
    uniform = torch.zeros(1, 3, 8)
    assert float(task_loss(uniform, torch.zeros(1, 3, dtype=torch.long))) == pytest.approx(math.log(8))
    assert float(task_loss(torch.zeros(3, 3, 8), torch.zeros(3, 3, dtype=torch.long), "sum")) == pytest.approx(3 * math.log(8))
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    assert float(task_correct(logits, torch.tensor([0, 0]))) == 1  # classifiers as before


def cell(**values):
    return {**CellParams().as_dict(), "world_size": 2, **values}


def test_models_and_data_of_different_kinds_are_refused_naming_both():
    with pytest.raises(CellConflict, match="mlp classifies images.*synthetic_tokens") as e:
        check_cell(cell(model="mlp", dataset="synthetic_tokens"))
    assert e.value.names == ("model", "dataset")
    with pytest.raises(CellConflict, match="gpt_tiny is a language model.*synthetic"):
        check_cell(cell(model="gpt_tiny", dataset="synthetic"))
    check_cell(cell(model="gpt_tiny", dataset="synthetic_tokens"))


def test_user_models_follow_the_pattern():
    assert CellParams(model="my_models.nets:build").model == "my_models.nets:build"
    assert is_user_model("a.b:c") and not is_user_model("gpt_tiny") and not is_user_model("mlp")
    for bad in ("my models:build", "nets:", ":build", "nets:build()", "vgg19"):
        with pytest.raises(ParamError, match="'model'.*module.path:function"):
            CellParams(model=bad)


def test_token_settings_are_one_measurement_for_image_cells():
    a = effective_params({**CellParams().as_dict(), "seq_len": 512})
    assert a == effective_params(CellParams().as_dict())
    tokens = {**CellParams(model="gpt_tiny", dataset="synthetic_tokens").as_dict()}
    assert effective_params({**tokens, "seq_len": 512}) != effective_params(tokens)
    assert effective_params({**CellParams().as_dict(), "model_path": "elsewhere"}) == effective_params(CellParams().as_dict())


def test_the_progress_line_of_a_token_cell_gives_tokens_per_s_too():
    from pathlib import Path

    from ddpbench.run.launch import progress_line

    line = progress_line(Path("r"), {"status": "ok", "samples_per_s": 29.1, "tokens_per_s": 29.1 * 512})
    assert line == "[ddpbench] r: ok 29.1 samples/s, 14,899 tokens/s"
    assert progress_line(Path("r"), {"status": "ok", "samples_per_s": 29.1}) == "[ddpbench] r: ok 29.1 samples/s"


def test_token_loss_takes_positions_as_rows_with_the_same_value_as_the_class_dimension_form():
    """task_loss flattens (N, T, V) to rows (CUDA's contiguous softmax, not its strided spatial
    one, docs/gpu.md); per sample it is still the mean over positions of the (N, V, T) form."""
    g = torch.Generator().manual_seed(0)
    out, y = torch.randn(3, 5, 11, generator=g), torch.randint(0, 11, (3, 5), generator=g)
    per_sample = torch.nn.functional.cross_entropy(out.transpose(1, 2), y, reduction="none").mean(1)
    assert torch.allclose(task_loss(out, y), per_sample.mean(), rtol=1e-6)
    assert torch.allclose(task_loss(out, y, "sum"), per_sample.sum(), rtol=1e-6)
