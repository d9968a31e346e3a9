"""A Transformer encoder layer (post-norm, BERT style) in plain PyTorch, random seeded weights.

BERT-base sizes by default: sequence 128, hidden 768, 12 heads, FFN 3072.
Written with explicit Linear / matmul / softmax / LayerNorm / GELU so each maps
to one of ext's op families (matmul, batch matmul, softmax, layer_norm).
"""
from __future__ import annotations

import math


def encoder_layer(hidden: int = 768, heads: int = 12, ffn: int = 3072, *, seed: int = 0, dropout: float = 0.1):
    import torch
    from torch import nn

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads, self.dh = heads, hidden // heads
            self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
            self.o = nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.drop = nn.Dropout(dropout)

        def split(self, t):
            b, s, _ = t.shape
            return t.reshape(b, s, self.heads, self.dh).permute(0, 2, 1, 3)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh), dim=-1)
            ctx = (att @ v).permute(0, 2, 1, 3).reshape(b, s, h)
            x = self.ln1(x + self.drop(self.o(ctx)))
            return self.ln2(x + self.drop(self.ff2(torch.nn.functional.gelu(self.ff1(x)))))

    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    torch.manual_seed(seed)
    return EncoderLayer().eval()


def last_hidden_state(body):
    """A ``torch.nn.Module`` returning ``body(input_ids=ids).last_hidden_state`` (a transformers
    encoder as a one-input, one-output model for import and benchmarks)."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, ids):
            return self.body(input_ids=ids).last_hidden_state

    return LastHidden().eval()
