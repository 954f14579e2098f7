"""A transformer's token layers on (n, L, D), as Flax modules holding the core's arrays as they are.

The class token, the position embedding and the attention keep their
parameters under the canonical names and in torch's layout, so
:mod:`.layout` passes them through untouched. Flax's own
``MultiHeadDotProductAttention`` would hold ``in_weight`` as three
(D, heads, d) kernels: one canonical array split into three leaves, and
back, on every state and optimizer slot. Here the attention is torch's
``nn.MultiheadAttention`` arithmetic written in jnp, at the run's precision
(``jax.nn.dot_product_attention`` takes none, and TF32 would break the
engines' agreement on GPUs).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.dtypes import promote_dtype
from jax import lax

from multidev.nn import swin

#: the state loads every array from the core's (layout.to_flax): a module never initialises its own
_LOADED = nn.initializers.zeros_init()


class ClassToken(nn.Module):
    """The learned ``token`` (D,) put before every sample's tokens."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        token = self.param("token", _LOADED, x.shape[-1:]).astype(x.dtype)
        return jnp.concatenate([jnp.broadcast_to(token, (x.shape[0], 1, x.shape[-1])), x], axis=1)


class PositionEmbedding(nn.Module):
    """The learned ``embedding`` (L, D) added to every sample."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.param("embedding", _LOADED, x.shape[1:]).astype(x.dtype)


def _linear(x: jax.Array, weight: jax.Array, bias: Optional[jax.Array], precision: lax.Precision) -> jax.Array:
    """x weight^T (+ bias), the weight (out, in) as torch and the core hold it."""
    y = jnp.einsum("...i,oi->...o", x, weight, precision=precision)
    return y if bias is None else y + bias


class MultiHeadAttention(nn.Module):
    """Self-attention as ``multidev.nn.MultiHeadAttention`` states it: q, k, v = x in_weight^T split in three rows
    (plus ``in_bias``), head h the features h * d .. (h + 1) * d - 1, q scaled by 1 / sqrt(d) before q k^T, softmax
    over the keys, the heads side by side times ``out_weight``^T (plus ``out_bias``)."""

    heads: int
    bias: bool = True
    dtype: Any = None  # the computation's (bf16's), the parameters staying in theirs; None: the parameters'
    precision: lax.Precision = lax.Precision.HIGHEST

    def _weights(self, d: int) -> tuple[jax.Array, Optional[jax.Array], jax.Array, Optional[jax.Array]]:
        """in_weight, in_bias, out_weight, out_bias, in the model's order (biases None without ``bias``)."""
        def bias(name: str, size: int) -> Optional[jax.Array]:
            return self.param(name, _LOADED, (size,)) if self.bias else None
        in_weight = self.param("in_weight", _LOADED, (3 * d, d))
        in_bias = bias("in_bias", 3 * d)
        return in_weight, in_bias, self.param("out_weight", _LOADED, (d, d)), bias("out_bias", d)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n, length, d = x.shape
        x, in_weight, in_bias, out_weight, out_bias = promote_dtype(x, *self._weights(d), dtype=self.dtype)
        q, k, v = (t.reshape(n, length, self.heads, d // self.heads)
                   for t in jnp.split(_linear(x, in_weight, in_bias, self.precision), 3, axis=-1))
        q = q * jnp.asarray(math.sqrt(1.0 / (d // self.heads)), q.dtype)  # torch scales the queries, not the scores
        scores = jnp.einsum("nqhd,nkhd->nhqk", q, k, precision=self.precision)
        mixed = jnp.einsum("nhqk,nkhd->nqhd", jax.nn.softmax(scores, axis=-1), v, precision=self.precision)
        return _linear(mixed.reshape(n, length, d), out_weight, out_bias, self.precision)


class WindowAttention(MultiHeadAttention):
    """Swin's attention within shifted windows of (n, H, W, C) (``multidev.nn.swin``): pad, roll and windows as
    reshapes, the attention above within each window, the relative position bias and then the shift's mask
    added to the scores, as torchvision adds them."""

    window: int = 7
    shift: int = 0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n, h, w, c = x.shape
        k, heads, p = self.window, self.heads, swin.plan(h, w, self.window, self.shift)
        table = self.param("table", _LOADED, (swin.table_size(k), heads))
        x, in_weight, in_bias, out_weight, out_bias, table = promote_dtype(x, *self._weights(c), table,
                                                                           dtype=self.dtype)
        grid = jnp.roll(jnp.pad(x, ((0, 0), (0, p.pad_bottom), (0, p.pad_right), (0, 0))),
                        (-p.shift_rows, -p.shift_cols), (1, 2))
        parts = grid.reshape(n, p.rows // k, k, p.cols // k, k, c).transpose(0, 1, 3, 2, 4, 5)
        parts = parts.reshape(n, -1, k * k, c)
        q, key, v = (t.reshape(*parts.shape[:3], heads, c // heads)
                     for t in jnp.split(_linear(parts, in_weight, in_bias, self.precision), 3, axis=-1))
        q = q * jnp.asarray(math.sqrt(1.0 / (c // heads)), q.dtype)
        scores = jnp.einsum("nwqhd,nwkhd->nwhqk", q, key, precision=self.precision)
        scores = scores + table[swin.relative_index(k)].transpose(2, 0, 1)
        if p.shifted:
            scores = scores + jnp.asarray(swin.mask(p, k)[:, None], scores.dtype)
        mixed = jnp.einsum("nwhqk,nwkhd->nwqhd", jax.nn.softmax(scores, axis=-1), v, precision=self.precision)
        y = _linear(mixed.reshape(parts.shape), out_weight, out_bias, self.precision)
        y = y.reshape(n, p.rows // k, p.cols // k, k, k, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, p.rows, p.cols, c)
        return jnp.roll(y, (p.shift_rows, p.shift_cols), (1, 2))[:, :h, :w]
