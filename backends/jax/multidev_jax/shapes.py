"""The engine's layout of values, and the layers that rearrange or combine them by the sample's canonical axes.

Every value of four axes is images, kept NHWC (XLA's convolutions want
them so); every other value keeps the canonical layout. A rank-3 sample
that is no image, such as (heads, L, d), is NHWC too, so that no value
needs to say which kind it is: layers that read axes by number map them
(:func:`engine_axis`), and those that move values in C order (Reshape,
Transpose, MatMul, Flatten) bring images to NCHW and back.
"""

from __future__ import annotations

from functools import reduce

import jax
import jax.numpy as jnp
from jax import lax

from multidev.nn import layers as md


def nhwc(a: jax.Array) -> jax.Array:
    """Canonical -> the engine's layout: images NCHW -> NHWC, other values as they are."""
    return jnp.transpose(a, (0, 2, 3, 1)) if a.ndim == 4 else a


def nchw(a: jax.Array) -> jax.Array:
    """The engine's layout -> canonical: :func:`nhwc` reversed."""
    return jnp.transpose(a, (0, 3, 1, 2)) if a.ndim == 4 else a


def sample_shape(x: jax.Array) -> tuple[int, ...]:
    """The canonical shape of one sample of ``x`` (the batch left out), as the model language states shapes."""
    return (x.shape[3], x.shape[1], x.shape[2]) if x.ndim == 4 else x.shape[1:]


def engine_axis(x: jax.Array, sample_axis: int) -> int:
    """A canonical axis of the sample (negative from the end) as an axis of ``x``: images' C, H, W are NHWC's
    3, 1, 2; other values keep the canonical layout, one past the batch."""
    index = sample_axis % (x.ndim - 1)
    return (3, 1, 2)[index] if x.ndim == 4 else index + 1


def padded(x: jax.Array, rank: int) -> jax.Array:
    """A canonical value of fewer axes with 1s right after the batch axis: NumPy's broadcasting of the samples
    lines up their last axes, and the batch axis stays first."""
    return x.reshape(x.shape[:1] + (1,) * (rank - x.ndim) + x.shape[1:])


def aligned(xs: list[jax.Array]) -> list[jax.Array]:
    """The inputs of Mul, Sub and Div, broadcast as the canonical samples' shapes are. Among images NHWC
    broadcasts as C, H, W does (every axis moves alike), so an image keeps its layout and lower ranks are padded
    and turned like it."""
    rank = max(x.ndim for x in xs)
    if rank == 4:
        return [x if x.ndim == 4 else nhwc(padded(x, 4)) for x in xs]
    return [padded(nchw(x), rank) for x in xs]


def product(xs: list[jax.Array]) -> jax.Array:
    return reduce(lambda a, b: a * b, aligned(xs))  # left to right, as the reference


def matmul(a: jax.Array, b: jax.Array, precision: lax.Precision) -> jax.Array:
    """MatMul on the canonical samples: the matrices are their last two axes, so images go to NCHW first; the
    lower rank is padded as :func:`product` pads, and the batch axis broadcasts with the leading ones."""
    a, b = nchw(a), nchw(b)
    rank = max(a.ndim, b.ndim)
    return nhwc(jnp.matmul(padded(a, rank), padded(b, rank), precision=precision))


def flatten(x: jax.Array) -> jax.Array:
    """C, H, W order (canonical)."""
    return nchw(x).reshape(x.shape[0], -1)


def reshape(layer: md.Reshape, x: jax.Array) -> jax.Array:
    """The canonical values in C order: an image (D, H, W) reshaped to (D, -1) is torch's (D, H * W)."""
    return nhwc(nchw(x).reshape(x.shape[:1] + layer.shape))


def transpose(layer: md.Transpose, x: jax.Array) -> jax.Array:
    return nhwc(jnp.transpose(nchw(x), (0, *(p + 1 for p in layer.perm))))


def sliced(layer: md.Slice, x: jax.Array) -> jax.Array:
    """Python's slice of the canonical axis, on the engine's axis it maps to."""
    axis, start, stop, step = layer.bounds(sample_shape(x))
    return lax.slice_in_dim(x, start, stop, step, engine_axis(x, axis))


def padded_axis(layer: md.Pad, x: jax.Array) -> jax.Array:
    """Constant padding of the canonical axis, on the engine's axis it maps to."""
    widths = [(0, 0)] * x.ndim
    widths[engine_axis(x, layer.axis)] = (layer.before, layer.after)
    return jnp.pad(x, widths, constant_values=jnp.asarray(layer.value, x.dtype))


def mean(layer: md.Mean, x: jax.Array) -> jax.Array:
    """The mean over canonical axes, taken in the canonical layout (its rank may change, and with it the layout)."""
    return nhwc(jnp.mean(nchw(x), axis=layer.batched(x.ndim - 1), keepdims=layer.keepdims))
