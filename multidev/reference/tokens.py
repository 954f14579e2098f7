"""A transformer's layers on token sequences (n, L, D), forward and backward, in NumPy, in the inputs' dtype.

As ``layers.py``: every forward returns its output and what its backward
needs, every backward the gradients of its input and parameters. The
weights are torch's layout (``multidev.nn.layers.tokens``), and the
attention is built from ``layers``' own dense, matrix product and softmax,
so it computes in the order a graph that writes attention out does.
"""

from __future__ import annotations

import numpy as np

from multidev.nn import swin
from multidev.reference import layers


def class_token(x: np.ndarray, token: np.ndarray):
    """The learned (D,) ``token`` put before each sample's tokens: (n, L, D) to (n, L + 1, D)."""
    n, _, d = x.shape
    first = np.broadcast_to(token.astype(x.dtype, copy=False), (n, 1, d))
    return np.concatenate([first, x], axis=1), None


def class_token_backward(dy: np.ndarray, _cache) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dtoken): the token is every sample's first row, so its gradient is their sum."""
    return dy[:, 1:].copy(), dy[:, 0].sum(axis=0)


def position_embedding(x: np.ndarray, embedding: np.ndarray):
    """x plus the learned (L, D) ``embedding``, the same for every sample."""
    return x + embedding, None


def position_embedding_backward(dy: np.ndarray, _cache) -> tuple[np.ndarray, np.ndarray]:
    return dy.copy(), dy.sum(axis=0)


def _heads(t: np.ndarray, heads: int) -> np.ndarray:
    """(n, L, D) to (n, heads, L, D / heads): head h holds features h * d .. (h + 1) * d - 1, torch's split."""
    n, length, d = t.shape
    return t.reshape(n, length, heads, d // heads).transpose(0, 2, 1, 3)


def _merge(t: np.ndarray) -> np.ndarray:
    """(n, heads, L, d) to (n, L, heads * d): the heads side by side, :func:`_heads` reversed."""
    n, heads, length, d = t.shape
    return t.transpose(0, 2, 1, 3).reshape(n, length, heads * d)


def attention(x: np.ndarray, in_weight: np.ndarray, in_bias: np.ndarray | None, out_weight: np.ndarray,
              out_bias: np.ndarray | None, heads: int, extra: tuple[np.ndarray, ...] = ()):
    """Multi-head self-attention of (n, L, D), torch's ``nn.MultiheadAttention(batch_first=True)`` without dropout.

    The queries are scaled by sqrt(1 / d) before they meet the keys, as torch
    scales them; biases None: torch's ``bias=False``. ``extra``: arrays added
    to the scores (n, heads, L, L) one after another before the softmax.
    """
    zero = np.zeros((), x.dtype)
    qkv, c_in = layers.dense(x, in_weight, zero if in_bias is None else in_bias)
    q, k, v = (_heads(part, heads) for part in np.split(qkv, 3, axis=-1))
    c_scale = x.dtype.type(np.sqrt(1.0 / q.shape[-1]))
    scores, c_qk = layers.matmul([q * c_scale, np.swapaxes(k, -1, -2)])
    for addend in extra:
        scores = scores + addend
    weights, c_soft = layers.softmax(scores, -1)
    mixed, c_av = layers.matmul([weights, v])
    y, c_out = layers.dense(_merge(mixed), out_weight, zero if out_bias is None else out_bias)
    return y, (c_in, c_scale, c_qk, c_soft, c_av, c_out, heads)


def _attention_back(dy: np.ndarray, cache):
    c_in, c_scale, c_qk, c_soft, c_av, c_out, heads = cache
    dmixed, d_out_weight, d_out_bias = layers.dense_backward(dy, c_out)
    dweights, dv = layers.matmul_backward(_heads(dmixed, heads), c_av)
    dscores = layers.softmax_backward(dweights, c_soft)
    dq, dkt = layers.matmul_backward(dscores, c_qk)
    dqkv = np.concatenate([_merge(dq * c_scale), _merge(np.swapaxes(dkt, -1, -2)), _merge(dv)], axis=-1)
    dx, d_in_weight, d_in_bias = layers.dense_backward(dqkv, c_in)
    return dx, d_in_weight, d_in_bias, d_out_weight, d_out_bias, dscores


def attention_backward(dy: np.ndarray, cache):
    """(dx, d in_weight, d in_bias, d out_weight, d out_bias): :func:`attention`'s steps in reverse."""
    return _attention_back(dy, cache)[:5]


def window_attention(x: np.ndarray, in_weight: np.ndarray, in_bias: np.ndarray | None, out_weight: np.ndarray,
                     out_bias: np.ndarray | None, table: np.ndarray, heads: int, window: int, shift: int):
    """Swin's attention within shifted windows of (n, H, W, C) (``multidev.nn.swin``): the relative position bias
    is added to the scores, then the mask, as torchvision adds them."""
    n, h, w, c = x.shape
    p = swin.plan(h, w, window, shift)
    grid = np.roll(np.pad(x, ((0, 0), (0, p.pad_bottom), (0, p.pad_right), (0, 0))),
                   (-p.shift_rows, -p.shift_cols), axis=(1, 2))
    parts = swin.windows(grid, window)
    count, size = parts.shape[1], window * window
    index = swin.relative_index(window)
    extra = (table[index].transpose(2, 0, 1)[None],)
    if p.shifted:
        extra += (np.tile(swin.mask(p, window).astype(x.dtype)[:, None], (n, 1, 1, 1)),)
    y, c_att = attention(parts.reshape(n * count, size, c), in_weight, in_bias, out_weight, out_bias, heads, extra)
    y = np.roll(swin.unwindows(y.reshape(n, count, size, c), window, p.rows, p.cols), (p.shift_rows, p.shift_cols),
                axis=(1, 2))
    return y[:, :h, :w], (c_att, x.shape, p, window, index, table.shape)


def window_attention_backward(dy: np.ndarray, cache):
    """(dx, d in_weight, d in_bias, d out_weight, d out_bias, d table): the table's rows gather the gradients of
    every pair at their offset."""
    c_att, (n, h, w, c), p, window, index, table_shape = cache
    grid = np.zeros((n, p.rows, p.cols, c), dy.dtype)
    grid[:, :h, :w] = dy
    parts = swin.windows(np.roll(grid, (-p.shift_rows, -p.shift_cols), axis=(1, 2)), window)
    count, size = parts.shape[1], window * window
    dx, d_in_weight, d_in_bias, d_out_weight, d_out_bias, dscores = \
        _attention_back(parts.reshape(n * count, size, c), c_att)
    d_table = np.zeros(table_shape, dy.dtype)
    np.add.at(d_table, index, dscores.sum(axis=0).transpose(1, 2, 0))
    dx = np.roll(swin.unwindows(dx.reshape(n, count, size, c), window, p.rows, p.cols), (p.shift_rows, p.shift_cols),
                 axis=(1, 2))
    return dx[:, :h, :w], d_in_weight, d_in_bias, d_out_weight, d_out_bias, d_table
