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

from multidev import nn as mnn  # the model language; `nn` is Gluon's

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


def block(layer: mnn.Layer, shape: Shape) -> Optional[nn.HybridBlock]:
    """The block for a token layer with parameters (``shape``: its input's, per sample); None for the rest."""
    if isinstance(layer, mnn.ClassToken):
        return ClassToken(shape)
    if isinstance(layer, mnn.PositionEmbedding):
        return PositionEmbedding(shape)
    if isinstance(layer, mnn.MultiHeadAttention):
        return MultiHeadAttention(layer, shape)
    return None
