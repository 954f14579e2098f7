"""The model language's layers of token sequences (L, D) as Gluon blocks: class token, position embedding and
multi-head self-attention, their parameters at the language's canonical names.

Gluon 1.x has no attention block, and MXNet's fused self-attention
(``contrib.interleaved_matmul_selfatt_qk``) wants the projections' rows
interleaved head by head, (L, N, 3 D) in time-major order: torch's layout
(the query rows, then the key rows, then the value rows) would need its
weights permuted on every load and save. So the attention is MXNet's own
``FullyConnected`` and ``batch_dot`` on the canonical weights as they are,
the heads stacked into ``batch_dot``'s batch axis; in a network compiled for
a fixed number of rows (:mod:`.rows`) the products are grouped convolutions.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from multidev import nn as mnn  # the model language; `nn` is Gluon's
from multidev.nn import swin

from .rows import grouped
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
    that one ``batch_dot`` takes every sample's and head's q k^T. With
    ``rows`` (float32, a network compiled for that many rows: :mod:`.rows`)
    and a token count :func:`.rows.grouped` takes, the two products are
    grouped 1x1 convolutions on oneDNN instead, one group per sample and
    head: a block's forward and backward in 3.6 ms against 4.9 (batch 32, 65
    tokens of 64, 4 heads; Zen 4, 2 threads), within float32's rounding of
    ``batch_dot`` (2e-7).
    """

    def __init__(self, layer: mnn.MultiHeadAttention, shape: Shape, rows: Optional[int] = None) -> None:
        super().__init__()
        self.rows = rows if rows and grouped(shape) else None  # elsewhere batch_dot is faster
        self.tokens = shape[0]
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
        q, k, v = (F.slice_axis(qkv, axis=2, begin=i * d, end=(i + 1) * d) for i in range(3))
        if self.rows:
            joined = self._grouped(F, q * self.scale, k, v)
        else:
            weights = F.softmax(F.batch_dot(self._split(F, q * self.scale), self._split(F, k), transpose_b=True),
                                axis=-1)  # over the keys
            heads = F.batch_dot(weights, self._split(F, v))  # (N * heads, L, D / heads)
            joined = F.reshape(F.transpose(F.reshape(heads, shape=(-4, -1, self.heads, 0, 0)), axes=(0, 2, 1, 3)),
                               shape=(0, 0, -3))
        return F.FullyConnected(joined, out_weight, out_bias, num_hidden=d, no_bias=out_bias is None, flatten=False)

    def _grouped(self, F, q, k, v):
        """The heads joined, (N, L, D), both products over ``rows`` samples as 1x1 convolutions of one group per
        sample and head: the keys' features are the channels and their tokens the positions, each query a filter;
        then the weights are the filters and the values' features the positions.

        Each convolution's data passes through a ``clip`` to float32's range
        (only an infinity changes): where oneDNN computes a convolution in its
        blocked layouts, as with a multiple of 4 tokens, the data's gradient
        comes back in them, and MXNet 1.9.1's oneDNN ``transpose`` after the
        reshape fails on it ("could not create a primitive descriptor for a
        reorder primitive"). ``clip`` has no oneDNN kernel, so MXNet hands its
        backward the gradient in the plain layout.
        """
        groups, tokens, per = self.rows * self.heads, self.tokens, self.dim // self.heads
        big = float(np.finfo(np.float32).max)

        def data(x, shape):
            return F.clip(F.reshape(x, shape=shape), -big, big)

        keys = F.transpose(F.reshape(k, shape=(0, 0, self.heads, -1)), axes=(0, 2, 3, 1))  # (N, heads, D/heads, L)
        scores = F.Convolution(data(keys, (1, groups * per, tokens, 1)),
                               F.reshape(self._split(F, q), shape=(groups * tokens, per, 1, 1)),
                               kernel=(1, 1), num_filter=groups * tokens, num_group=groups, no_bias=True)
        weights = F.softmax(F.reshape(scores, shape=(groups, tokens, tokens)), axis=-1)  # over the keys
        mixed = F.Convolution(data(self._split(F, v), (1, groups * tokens, per, 1)),
                              F.reshape(weights, shape=(groups * tokens, tokens, 1, 1)),
                              kernel=(1, 1), num_filter=groups * tokens, num_group=groups, no_bias=True)
        heads = F.reshape(mixed, shape=(-1, self.heads, tokens, per))
        return F.reshape(F.transpose(heads, axes=(0, 2, 1, 3)), shape=(0, 0, -3))

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


def block(layer: mnn.Layer, shape: Shape, rows: Optional[int] = None) -> Optional[nn.HybridBlock]:
    """The block for a token layer with parameters (``shape``: its input's, per sample; ``rows``: those the
    network is compiled for, :mod:`.rows`); None for the rest."""
    if isinstance(layer, mnn.ClassToken):
        return ClassToken(shape)
    if isinstance(layer, mnn.PositionEmbedding):
        return PositionEmbedding(shape)
    if isinstance(layer, mnn.MultiHeadAttention):
        return MultiHeadAttention(layer, shape, rows)
    if isinstance(layer, mnn.WindowAttention):
        return WindowAttention(layer, shape)
    return None
