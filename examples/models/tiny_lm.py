"""An example of your own language model for ddpbench (docs/models.md, "Your own model").

    model: "tiny_lm:tiny_lm"
    model_path: examples/models
    dataset: synthetic_tokens

ddpbench calls the function with keyword arguments: vocab_size=V and seq_len=T for token
data. It returns an nn.Module that maps N x T token ids to N x T x V logits (the next token
at each position).
"""

import torch
from torch import nn


class TinyLM(nn.Module):
    """Token and position embeddings, one causal self-attention block, a linear head."""

    def __init__(self, vocab_size, seq_len, width=64, heads=4):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Embedding(seq_len, width)
        self.block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(t, device=ids.device))
        causal = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
        return self.head(self.block(x, src_mask=causal, is_causal=True))


def tiny_lm(vocab_size, seq_len, **kwargs):
    return TinyLM(vocab_size, seq_len)
