"""Convolution for Flax's ``nn.Conv`` that avoids XLA:CPU's slow paths: tiny outputs, inputs computed twice.

XLA:CPU computes a convolution whose output is smaller than its kernel (a
3x3 convolution on the 2x2 and 1x1 maps of ResNet-18's last stages on small
images) 20 to 40 times slower than the same arithmetic as one matrix product
(measured: 2x2x256 -> 256, batch 64: 48 ms forward against 2.4 ms). On the
CPU those convolutions are therefore computed as ``patches @ kernel``; every
other one, and every one on a GPU, is ``lax.conv_general_dilated`` itself.

:func:`conv_general_dilated_once` also passes the input through
:func:`computed_once`, for the engine's ``once`` form (:mod:`.conv_inputs`).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
from jax import lax

_NHWC_HWIO = lax.ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2))


def _trivial(dilation: Any) -> bool:
    return dilation is None or all(d == 1 for d in dilation)


def _output_smaller_than_kernel(lhs: jax.Array, rhs: jax.Array, strides: Sequence[int],
                                padding: Sequence[tuple[int, int]]) -> bool:
    sizes = [(lhs.shape[1 + a] + sum(padding[a]) - rhs.shape[a]) // strides[a] + 1 for a in (0, 1)]
    return min(sizes) >= 1 and any(size < rhs.shape[a] for a, size in enumerate(sizes))


def _reaches_data(tap: int, out: int, stride: int, low: int, size: int) -> bool:
    """Whether kernel offset ``tap`` ever lands on a real (not padding) row or column."""
    return any(low <= tap + r * stride < low + size for r in range(out))


def patches_matmul(lhs: jax.Array, rhs: jax.Array, strides: Sequence[int], padding: Sequence[tuple[int, int]],
                   precision: Any = None) -> jax.Array:
    """An NHWC x HWIO convolution as one matrix product of im2col patches and the kernel.

    Kernel taps that only ever see padding multiply zeros and are left out
    (a 3x3 kernel on a 1x1 map keeps its centre alone); the result is the same.
    """
    kh, kw = rhs.shape[:2]
    (top, _), (left, _) = padding
    x = jnp.pad(lhs, ((0, 0), tuple(padding[0]), tuple(padding[1]), (0, 0)))
    oh = (x.shape[1] - kh) // strides[0] + 1
    ow = (x.shape[2] - kw) // strides[1] + 1
    kept = [(i, j) for i in range(kh) for j in range(kw)
            if _reaches_data(i, oh, strides[0], top, lhs.shape[1])
            and _reaches_data(j, ow, strides[1], left, lhs.shape[2])]
    taps = [x[:, i:i + (oh - 1) * strides[0] + 1:strides[0], j:j + (ow - 1) * strides[1] + 1:strides[1], :]
            for i, j in kept]
    patches = jnp.concatenate(taps, axis=-1)
    kernel = jnp.concatenate([rhs[i, j] for i, j in kept], axis=0)  # (taps * cin, cout), in the patches' order
    return lax.dot_general(patches, kernel, (((3,), (0,)), ((), ())), precision=precision)


def _gathered(x: jax.Array) -> jax.Array:
    return x.at[jnp.arange(x.shape[0])].get(mode="promise_in_bounds")


@jax.custom_vjp
def computed_once(x: jax.Array) -> jax.Array:
    """``x`` itself, read through a gather: XLA:CPU counts a gather as expensive and writes its result once,
    instead of copying the arithmetic that makes ``x`` into every operation that reads it. The gradient passes
    straight through (no scatter)."""
    return _gathered(x)


def _once_forward(x: jax.Array) -> tuple[jax.Array, None]:
    return _gathered(x), None


def _once_backward(_: None, cotangent: jax.Array) -> tuple[jax.Array]:
    return (cotangent,)


computed_once.defvjp(_once_forward, _once_backward)


def conv_general_dilated_once(lhs: jax.Array, rhs: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """:func:`conv_general_dilated` of an input written once (:func:`computed_once`)."""
    return conv_general_dilated(computed_once(lhs), rhs, *args, **kwargs)


def conv_general_dilated(lhs: jax.Array, rhs: jax.Array, window_strides: Sequence[int], padding: Any,
                         lhs_dilation: Any = None, rhs_dilation: Any = None, dimension_numbers: Any = None,
                         feature_group_count: int = 1, precision: Any = None, **kwargs: Any) -> jax.Array:
    """``lax.conv_general_dilated``, with tiny-output 2-D convolutions as a matrix product."""
    if (lhs.ndim == 4 and dimension_numbers == _NHWC_HWIO and feature_group_count == 1 and not kwargs
            and _trivial(lhs_dilation) and _trivial(rhs_dilation) and not isinstance(padding, str)
            and _output_smaller_than_kernel(lhs, rhs, window_strides, padding)):
        return patches_matmul(lhs, rhs, window_strides, padding, precision)
    return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                    rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                                    feature_group_count=feature_group_count, precision=precision, **kwargs)
