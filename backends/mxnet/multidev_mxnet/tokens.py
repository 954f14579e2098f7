"""The model language's layers of token sequences (L, D) as Gluon blocks: class token, position embedding and
multi-head self-attention, their parameters at the language's canonical names.

Gluon 1.x has no attention block, and MXNet's fused self-attention
(``contrib.interleaved_matmul_selfatt_qk``) wants the projections' rows
interleaved head by head, (L, N, 3 D) in time-major order: torch's layout
(the query rows, then the key rows, then the value rows) would need its
weights permuted on every load and save. So the attention is MXNet's own
``FullyConnected`` and ``batch_dot`` on the canonical weights as they are,
the heads stacked into ``batch_dot``'s batch axis.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from multidev import nn as mnn  # the model language; `nn` is Gluon's
from multidev.nn import swin

from .runtime import mxnet

mx = mxnet()

nn = mx.gluon.nn

Shape = tuple[int, ...]


class ClassToken(nn.HybridBlock):
    """A learned ``token`` (D,) put before each sample's tokens: (N, L, D) to (N, L + 1, D)."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        with self.name_scope():
            self.token = self.params.get("token", shape=(shape[-1],))

    def hybrid_forward(self, F, x, token):
        first = F.broadcast_like(F.reshape(token, shape=(1, 1, -1)), x, lhs_axes=(0,), rhs_axes=(0,))
        return F.concat(first, x, dim=1)


class PositionEmbedding(nn.HybridBlock):
    """A learned ``embedding`` (L, D) added to each sample's tokens."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        with self.name_scope():
            self.embedding = self.params.get("embedding", shape=tuple(shape))

    def hybrid_forward(self, F, x, embedding):
        return F.broadcast_add(x, F.expand_dims(embedding, axis=0))


class MultiHeadAttention(nn.HybridBlock):
    """torch's ``nn.MultiheadAttention(D, heads, batch_first=True)`` without dropout, on (N, L, D).

    One projection gives q, k and v side by side (``in_weight`` (3 D, D));
    each is split into its heads, (N, L, D) to (N * heads, L, D / heads), so
    that one ``batch_dot`` takes every sample's and head's q k^T.
    """

    def __init__(self, layer: mnn.MultiHeadAttention, shape: Shape) -> None:
        super().__init__()
        self.dim, self.heads = shape[-1], layer.heads
        self.scale = 1.0 / math.sqrt(self.dim // self.heads)
        d = self.dim
        with self.name_scope():
            self.in_weight = self.params.get("in_weight", shape=(3 * d, d))
            if layer.bias:
                self.in_bias = self.params.get("in_bias", shape=(3 * d,))
            self.out_weight = self.params.get("out_weight", shape=(d, d))
            if layer.bias:
                self.out_bias = self.params.get("out_bias", shape=(d,))

    def hybrid_forward(self, F, x, in_weight, out_weight, in_bias=None, out_bias=None):
        d = self.dim
        qkv = F.FullyConnected(x, in_weight, in_bias, num_hidden=3 * d, no_bias=in_bias is None, flatten=False)
        q, k, v = (self._split(F, F.slice_axis(qkv, axis=2, begin=i * d, end=(i + 1) * d)) for i in range(3))
        weights = F.softmax(F.batch_dot(q * self.scale, k, transpose_b=True), axis=-1)  # over the keys
        heads = F.batch_dot(weights, v)  # (N * heads, L, D / heads)
        joined = F.reshape(F.transpose(F.reshape(heads, shape=(-4, -1, self.heads, 0, 0)), axes=(0, 2, 1, 3)),
                           shape=(0, 0, -3))
        return F.FullyConnected(joined, out_weight, out_bias, num_hidden=d, no_bias=out_bias is None, flatten=False)

    def _split(self, F, x):
        """(N, L, D) to (N * heads, L, D / heads): head h holds features h * D / heads onwards, as torch's."""
        return F.reshape(F.transpose(F.reshape(x, shape=(0, 0, self.heads, -1)), axes=(0, 2, 1, 3)),
                         shape=(-3, 0, 0))


class WindowAttention(MultiHeadAttention):
    """Swin's attention within shifted windows of (N, H, W, C) (``multidev.nn.swin``): ``pad`` on the grid as
    NCHW (its last two axes), the roll as two slices joined, the windows as reshapes, the attention above with
    the relative position bias (``take`` of the table) and then the shift's mask added to the scores.

    The relative index and the mask are Gluon constants (a graph reads arrays only from variables).
    """

    def __init__(self, layer: mnn.WindowAttention, shape: Shape) -> None:
        super().__init__(mnn.MultiHeadAttention(layer.heads, layer.bias), shape)
        self.size, self.k = shape[:2], layer.window
        self.plan = swin.plan(shape[0], shape[1], layer.window, layer.shift)
        with self.name_scope():
            self.table = self.params.get("table", shape=(swin.table_size(layer.window), layer.heads))
            self.index = self.params.get_constant("index", swin.relative_index(self.k).reshape(-1).astype(np.float32))
            if self.plan.shifted:
                self.mask = self.params.get_constant("mask", swin.mask(self.plan, self.k)[None, :, None])

    def hybrid_forward(self, F, x, in_weight, out_weight, table, index, in_bias=None, out_bias=None, mask=None):
        p, k, (h, w), d, heads = self.plan, self.k, self.size, self.dim, self.heads
        grid = F.transpose(F.pad(F.transpose(x, axes=(0, 3, 1, 2)), mode="constant", constant_value=0.0,
                                 pad_width=(0, 0, 0, 0, 0, p.pad_bottom, 0, p.pad_right)), axes=(0, 2, 3, 1))
        grid = _rolled(F, _rolled(F, grid, 1, p.shift_rows, p.rows), 2, p.shift_cols, p.cols)
        parts = F.reshape(F.transpose(F.reshape(grid, shape=(-1, p.rows // k, k, p.cols // k, k, d)),
                                      axes=(0, 1, 3, 2, 4, 5)), shape=(-1, k * k, d))
        qkv = F.FullyConnected(parts, in_weight, in_bias, num_hidden=3 * d, no_bias=in_bias is None, flatten=False)
        q, key, v = (self._split(F, F.slice_axis(qkv, axis=2, begin=i * d, end=(i + 1) * d)) for i in range(3))
        scores = F.reshape(F.batch_dot(q * self.scale, key, transpose_b=True),
                           shape=(-1, (p.rows // k) * (p.cols // k), heads, k * k, k * k))
        bias = F.transpose(F.reshape(F.take(table, index), shape=(1, 1, k * k, k * k, heads)), axes=(0, 1, 4, 2, 3))
        scores = F.broadcast_add(scores, bias)
        if mask is not None:
            scores = F.broadcast_add(scores, mask)
        mixed = F.batch_dot(F.softmax(F.reshape(scores, shape=(-1, k * k, k * k)), axis=-1), v)
        joined = F.reshape(F.transpose(F.reshape(mixed, shape=(-4, -1, heads, 0, 0)), axes=(0, 2, 1, 3)),
                           shape=(0, 0, -3))
        y = F.FullyConnected(joined, out_weight, out_bias, num_hidden=d, no_bias=out_bias is None, flatten=False)
        y = F.reshape(F.transpose(F.reshape(y, shape=(-1, p.rows // k, p.cols // k, k, k, d)),
                                  axes=(0, 1, 3, 2, 4, 5)), shape=(-1, p.rows, p.cols, d))
        y = _rolled(F, _rolled(F, y, 1, p.rows - p.shift_rows, p.rows), 2, p.cols - p.shift_cols, p.cols)
        return F.slice(y, begin=(None, 0, 0, None), end=(None, h, w, None))


def _rolled(F, x, axis: int, by: int, size: int):
    """x rolled back by ``by`` along ``axis`` (NumPy's roll by -by): the rows from ``by`` on, then the first."""
    if by % size == 0:
        return x
    return F.concat(F.slice_axis(x, axis=axis, begin=by, end=size), F.slice_axis(x, axis=axis, begin=0, end=by),
                    dim=axis)


def block(layer: mnn.Layer, shape: Shape) -> Optional[nn.HybridBlock]:
    """The block for a token layer with parameters (``shape``: its input's, per sample); None for the rest."""
    if isinstance(layer, mnn.ClassToken):
        return ClassToken(shape)
    if isinstance(layer, mnn.PositionEmbedding):
        return PositionEmbedding(shape)
    if isinstance(layer, mnn.MultiHeadAttention):
        return MultiHeadAttention(layer, shape)
    if isinstance(layer, mnn.WindowAttention):
        return WindowAttention(layer, shape)
    return None
