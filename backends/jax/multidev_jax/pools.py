"""MaxPool2d and AvgPool2d with torch's semantics (the model language's rule), on Flax's ``lax.reduce_window`` pools.

:mod:`multidev.nn.windows` gives the padding and the positions ``ceil_mode``'s
last windows reach past it; both become explicit pads of one reduce_window.
Max pads with -inf (Flax's ``max_pool``), so padding never wins and its
gradient is zero. The mean sums with zeros there and divides each window by
its own count, worked out at trace time from the static shapes: the padding's
positions count with ``count_include_pad``, ``ceil_mode``'s never, and without
it only the input's own pixels do (Flax's ``avg_pool`` would count ceil_mode's
positions as padding).

On a CPU the max runs as its window's taps (:func:`max_taps`): XLA:CPU
expands reduce_window's gradient into four index arrays of the input's size
and a scatter, a fifth of VGG-11's step at 224 px.
"""

from __future__ import annotations

from functools import partial, reduce
from typing import Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from multidev.nn import layers as md

from .taps import strided_taps

Pads = tuple[tuple[int, int], tuple[int, int]]  # (top, bottom), (left, right), ceil_mode's positions included


def chw(x: jax.Array) -> tuple[int, int, int]:
    """The canonical (C, H, W) shape of NHWC images, which the model language's window rules take."""
    return x.shape[3], x.shape[1], x.shape[2]


def pads(layer: md.MaxPool2d, x: jax.Array) -> Pads:
    shape = chw(x)
    top, bottom, left, right = layer.sides(shape)
    down, across = layer.ceil_extra(shape)
    return (top, bottom + down), (left, right + across)


def _counts(n: int, kernel: int, stride: int, before: int, after: int, outputs: int,
            padding_counts: bool) -> np.ndarray:
    """How many positions of each window along one axis count in the mean."""
    starts = np.arange(outputs) * stride - before
    low, high = (-before, n + after) if padding_counts else (0, n)
    return np.maximum(np.minimum(starts + kernel, high) - np.maximum(starts, low), 1)


def _divisor(layer: md.AvgPool2d, x: jax.Array, out: tuple[int, int]) -> np.ndarray:
    """(1, OH, OW, 1): each window's count, rows' times columns' (the window is a rectangle)."""
    _, h, w = chw(x)
    top, bottom, left, right = layer.sides(chw(x))
    k, s, counted = layer.kernel_size, layer.step, layer.count_include_pad
    rows = _counts(h, k, s, top, bottom, out[0], counted)
    cols = _counts(w, k, s, left, right, out[1], counted)
    return np.outer(rows, cols)[None, :, :, None]


def pool(layer: Union[md.MaxPool2d, md.AvgPool2d], x: jax.Array, taps: bool = False) -> jax.Array:
    """The layer on NHWC images; ``taps``: a max as its window's taps (CPUs)."""
    k, s = layer.kernel_size, layer.step
    padding = pads(layer, x)
    if not isinstance(layer, md.AvgPool2d):
        if taps:
            return max_taps(x, k, s, padding)
        return nn.max_pool(x, (k, k), strides=(s, s), padding=padding)
    total = nn.pool(x, 0.0, lax.add, (k, k), (s, s), padding)
    return total / jnp.asarray(_divisor(layer, x, total.shape[1:3]), x.dtype)


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def max_taps(x: jax.Array, kernel: int, stride: int, padding: Pads) -> jax.Array:
    """The max over each ``kernel`` x ``kernel`` window (-inf padding) as the maximum of its strided taps; its
    gradient goes to the window's first maximum in row-major order, as reduce_window's (and torch's) does."""
    return _max_taps_forward(x, kernel, stride, padding)[0]


def _window_taps(x: jax.Array, kernel: int, stride: int, padding: Pads) -> list[jax.Array]:
    """The window's taps, row by row, of the input padded with -inf."""
    _, tap = strided_taps(x, (kernel, kernel), (stride, stride), padding, fill=-jnp.inf)
    return [tap(i, j) for i in range(kernel) for j in range(kernel)]


def _max_taps_forward(x: jax.Array, kernel: int, stride: int, padding: Pads) -> tuple[jax.Array, tuple]:
    y = reduce(jnp.maximum, _window_taps(x, kernel, stride, padding))
    return y, (x, y)


def _max_taps_backward(kernel: int, stride: int, padding: Pads, saved: tuple, g: jax.Array) -> tuple[jax.Array]:
    x, y = saved
    taps, pull = jax.vjp(lambda a: _window_taps(a, kernel, stride, padding), x)
    free, parts = jnp.ones(y.shape, bool), []
    for tap in taps:  # the first tap equal to the max takes the window's gradient
        hit = free & (tap == y)
        free = free & ~hit
        parts.append(jnp.where(hit, g, jnp.zeros_like(g)))
    return pull(parts)


max_taps.defvjp(_max_taps_forward, _max_taps_backward)
