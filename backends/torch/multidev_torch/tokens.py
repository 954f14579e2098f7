"""The model language's layers of token sequences (L, D) that hold parameters, on torch's own primitives.

torch's ``nn.MultiheadAttention`` keeps its weights as ``in_proj_weight`` and
``out_proj.weight``; the language's are ``in_weight`` and ``out_weight`` in
the same layout, so the attention here holds them under the canonical names
and runs torch's functional pieces (``F.linear``,
``F.scaled_dot_product_attention``: flash or memory-efficient kernels where
the device has them), and ``state_dict()`` needs no renaming.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from multidev.nn import layers as L

Shape = tuple[int, ...]


class ClassToken(nn.Module):
    """A learned ``token`` (D,) put before each sample's tokens: (n, L, D) to (n, L + 1, D)."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.token = nn.Parameter(torch.zeros(shape[-1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # expand is a view: the one token's gradient sums over the batch with no copy of it per sample
        return torch.cat([self.token.to(x.dtype).expand(x.shape[0], 1, -1), x], dim=1)


class PositionEmbedding(nn.Module):
    """A learned ``embedding`` (L, D) added to each sample's tokens."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embedding = nn.Parameter(torch.zeros(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.embedding


def _optional(size: int, present: bool) -> Optional[nn.Parameter]:
    return nn.Parameter(torch.zeros(size)) if present else None


class MultiHeadAttention(nn.Module):
    """Self-attention as ``nn.MultiheadAttention(D, heads, batch_first=True)`` computes it without dropout, its
    weights at the language's names (``in_weight`` (3D, D) stacks the query, key and value rows)."""

    def __init__(self, layer: L.MultiHeadAttention, shape: Shape) -> None:
        super().__init__()
        d = shape[-1]
        self.heads = layer.heads
        self.in_weight = nn.Parameter(torch.zeros(3 * d, d))
        self.in_bias = _optional(3 * d, layer.bias)
        self.out_weight = nn.Parameter(torch.zeros(d, d))
        self.out_bias = _optional(d, layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, d = x.shape
        qkv = F.linear(x, self.in_weight, self.in_bias).view(n, length, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (n, heads, L, d / heads)
        heads = F.scaled_dot_product_attention(q, k, v)  # scaled by 1 / sqrt(d / heads), as torch's module
        return F.linear(heads.transpose(1, 2).reshape(n, length, d), self.out_weight, self.out_bias)


def module(layer: L.Layer, shape: Shape) -> Optional[nn.Module]:
    """The module of a token layer (``shape``: its input's sample); None for any other layer."""
    if isinstance(layer, L.ClassToken):
        return ClassToken(shape)
    if isinstance(layer, L.PositionEmbedding):
        return PositionEmbedding(shape)
    if isinstance(layer, L.MultiHeadAttention):
        return MultiHeadAttention(layer, shape)
    return None
