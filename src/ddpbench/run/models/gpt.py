"""A GPT-style decoder in plain torch, the language model of the grid.

Token and learned position embeddings, n_layer pre-norm blocks (causal self-attention
through F.scaled_dot_product_attention, then a 4x-wide GELU MLP), a final LayerNorm and a
head tied to the token embedding (GPT-2's layout, as in nanoGPT). No dropout, so the exact
strategies can be checked for equality with `single` on it. The output is logits over the
vocabulary at every position, (batch, seq_len, vocab_size).

Sizes: `gpt_tiny` trains on a CPU in seconds; `gpt2_small` (124 M parameters at GPT-2's
50,257-token vocabulary and 1,024 context) and `gpt2_medium` (350 M) are GPT-2's, for GPUs.
The cell's vocab_size and seq_len set the embedding and the context; the sizes set the rest.
The models' family in the registry (ddpbench.run.models): MODELS names the sizes, SIZES shapes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


MODELS = {"gpt_tiny": {"kind": "tokens"}, "gpt2_small": {"kind": "tokens"}, "gpt2_medium": {"kind": "tokens"}}
ORDER = 50


@dataclass(frozen=True)
class GPTSize:
    n_layer: int
    n_head: int
    d_model: int


SIZES = {
    "gpt_tiny": GPTSize(n_layer=2, n_head=4, d_model=128),
    "gpt2_small": GPTSize(n_layer=12, n_head=12, d_model=768),
    "gpt2_medium": GPTSize(n_layer=24, n_head=16, d_model=1024),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, size: GPTSize, vocab_size: int, seq_len: int):
        super().__init__()
        if size.d_model % size.n_head:
            raise ValueError(f"d_model {size.d_model} is not a multiple of n_head {size.n_head}")
        self.size, self.seq_len = size, seq_len
        self.tok = nn.Embedding(vocab_size, size.d_model)
        self.pos = nn.Embedding(seq_len, size.d_model)
        self.blocks = nn.ModuleList(Block(size.d_model, size.n_head) for _ in range(size.n_layer))
        self.ln_f = nn.LayerNorm(size.d_model)
        self.apply(self._init)
        # GPT-2's scaled init of the projections that write into the residual stream.
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp[2]):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * size.n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def fsdp_units(self) -> list[nn.Module]:
        """What FSDP shards one by one: the blocks (the embeddings, the final norm and the
        tied head stay in the root's unit, gathered for the whole forward)."""
        return list(self.blocks)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.seq_len:
            raise ValueError(f"a sequence of {t} tokens is longer than the model's context of {self.seq_len}")
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tok.weight)  # the head is the token embedding (tied)


def build(name: str, shape: tuple[int, ...], classes: int) -> GPT:
    """GPT `name` over a vocabulary of `classes` tokens with a context of shape[0] (seq_len)."""
    return GPT(SIZES[name], classes, shape[0])


def non_embedding_parameters(model: GPT) -> int:
    """N of the 6·N·tokens rule: every parameter but the embeddings (the tied head's matmul
    is counted separately by the FLOP formulas, as Kaplan et al. do)."""
    return sum(p.numel() for p in model.parameters()) - model.tok.weight.numel() - model.pos.weight.numel()
