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
from multidev.nn import swin

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


class WindowAttention(MultiHeadAttention):
    """Swin's attention within shifted windows of (n, H, W, C): pad, roll and windows as tensor views, the
    relative position bias (and the shift's mask) as the additive mask of ``F.scaled_dot_product_attention``."""

    def __init__(self, layer: L.WindowAttention, shape: Shape) -> None:
        super().__init__(L.MultiHeadAttention(layer.heads, layer.bias), shape)
        self.window = layer.window
        self.table = nn.Parameter(torch.zeros(swin.table_size(layer.window), layer.heads))
        self.register_buffer("index", torch.from_numpy(swin.relative_index(layer.window)), persistent=False)
        h, w, _ = shape
        self.plan = swin.plan(h, w, layer.window, layer.shift)
        masked = swin.mask(self.plan, layer.window)[:, None] if self.plan.shifted else None
        self.register_buffer("mask", None if masked is None else torch.from_numpy(masked), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, h, w, c = x.shape
        p, k = self.plan, self.window
        grid = torch.roll(F.pad(x, (0, 0, 0, p.pad_right, 0, p.pad_bottom)), (-p.shift_rows, -p.shift_cols), (1, 2))
        parts = grid.view(n, p.rows // k, k, p.cols // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(n, -1, k * k, c)
        qkv = F.linear(parts, self.in_weight, self.in_bias).view(n, parts.shape[1], k * k, 3, self.heads, -1)
        q, k_, v = qkv.permute(3, 0, 1, 4, 2, 5).unbind(0)  # each (n, windows, heads, window^2, d / heads)
        bias = self.table[self.index].permute(2, 0, 1).to(x.dtype)
        if self.mask is not None:  # (windows, 1, N, N): the bias first, then the mask, as torchvision adds them
            bias = bias + self.mask.to(x.dtype)
        mixed = F.scaled_dot_product_attention(q, k_, v, attn_mask=bias)
        y = F.linear(mixed.transpose(2, 3).reshape(n, -1, k * k, c), self.out_weight, self.out_bias)
        y = y.view(n, p.rows // k, p.cols // k, k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(n, p.rows, p.cols, c)
        return torch.roll(y, (p.shift_rows, p.shift_cols), (1, 2))[:, :h, :w]


def module(layer: L.Layer, shape: Shape) -> Optional[nn.Module]:
    """The module of a token layer (``shape``: its input's sample); None for any other layer."""
    if isinstance(layer, L.ClassToken):
        return ClassToken(shape)
    if isinstance(layer, L.PositionEmbedding):
        return PositionEmbedding(shape)
    if isinstance(layer, L.MultiHeadAttention):
        return MultiHeadAttention(layer, shape)
    if isinstance(layer, L.WindowAttention):
        return WindowAttention(layer, shape)
    return None
