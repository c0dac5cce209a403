"""The GPT-style decoder: GPT-2's sizes, causal, a tied head, deterministic (no dropout)."""

import pytest
import torch

from ddpbench.run import models
from ddpbench.run.models import gpt


def parameters(vocab: int, context: int, d: int, layers: int) -> int:
    """By hand: embeddings (head tied to the token one), per block 2 LayerNorms (2d each),
    qkv (3d^2 + 3d), projection (d^2 + d), MLP (4d^2 + 4d and 4d^2 + d); the final LayerNorm."""
    return vocab * d + context * d + layers * (12 * d * d + 13 * d) + 2 * d


@pytest.mark.parametrize(
    "name, vocab, context, expected",
    [("gpt_tiny", 256, 128, 445_952), ("gpt2_small", 50_257, 1024, 124_439_808), ("gpt2_medium", 50_257, 1024, 354_823_168)],
)
def test_sizes_are_gpt2s(name, vocab, context, expected):
    size = gpt.SIZES[name]
    with torch.device("meta"):  # GPT-2 medium's 1.4 GB never allocated
        model = models.build(name, (context,), vocab, kind="tokens")
    assert models.count_parameters(model) == expected == parameters(vocab, context, size.d_model, size.n_layer)


def test_output_is_logits_per_position_and_the_head_is_the_embedding():
    torch.manual_seed(0)
    model = models.build("gpt_tiny", (16,), 50, kind="tokens")
    idx = torch.randint(50, (3, 16))
    assert model(idx).shape == (3, 16, 50)
    assert sum(1 for p in model.parameters() if p is model.tok.weight) == 1  # one tensor, used twice
    before = model(idx)
    with torch.no_grad():
        model.tok.weight[7].add_(1.0)  # the head's row for token 7 moves with the embedding
    after = model(idx)
    assert not torch.allclose(before[..., 7], after[..., 7])
    assert torch.equal(model(idx), after)  # no dropout: training mode is deterministic


def test_attention_is_causal():
    torch.manual_seed(0)
    model = models.build("gpt_tiny", (16,), 50, kind="tokens")
    idx = torch.randint(50, (2, 16))
    later = idx.clone()
    later[:, 10:] = (later[:, 10:] + 1) % 50
    a, b = model(idx), model(later)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)  # positions before 10 never see 10 onwards
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_refusals_name_the_problem():
    model = models.build("gpt_tiny", (8,), 20, kind="tokens")
    with pytest.raises(ValueError, match="longer than the model's context of 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="gpt_tiny is a language model"):
        models.build("gpt_tiny", (3, 32, 32), 10)
    with pytest.raises(ValueError, match="mlp classifies images"):
        models.build("mlp", (32,), 64, kind="tokens")


def test_fsdp_units_are_the_blocks():
    from ddpbench.strategies import fsdp

    model = models.build("gpt_tiny", (8,), 20, kind="tokens")
    assert fsdp.blocks(model) == list(model.blocks)  # the tied embedding stays with the root
    assert gpt.non_embedding_parameters(model) == models.count_parameters(model) - 20 * 128 - 8 * 128
