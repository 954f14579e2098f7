"""Convolution for Flax's ``nn.Conv`` that avoids XLA:CPU's slow paths: tiny outputs, depthwise kernels, inputs
computed twice.

XLA:CPU computes a convolution whose output is smaller than its kernel (a
3x3 convolution on the 2x2 and 1x1 maps of ResNet-18's last stages on small
images) 20 to 40 times slower than the same arithmetic as one matrix product
(measured: 2x2x256 -> 256, batch 64: 48 ms forward against 2.4 ms). On the
CPU those convolutions are therefore computed as ``patches @ kernel``; every
other one, and every one on a GPU, is ``lax.conv_general_dilated`` itself.

XLA:CPU's depthwise convolution (one filter per channel, MobileNet's and
EfficientNet's) is slow too: a 3x3 one, forward and backward, took 4 to 16
times as long as its taps written out, each a strided slice of the padded
input times that tap's per-channel weights, all added (AMD EPYC Zen 4,
MobileNetV2's shapes at 32 px, batch 32: 63 ms against 16 ms at 32x32x32,
95 against 6 at 4x4x960). XLA fuses those taps into one loop, so a
depthwise convolution in float32 or float64 is computed that way on the CPU
(:func:`depthwise_taps`): the same sums, added in another order. In a
network XLA also fused the arithmetic that makes the input (and, backward,
the output's gradient: BatchNorm's and ReLU6's) into every tap that reads
it, nine times over, and summed the weights' gradient as reductions of
strided slices. So the input, the output and both gradients are written
once, and each tap's weight gradient, a per-channel sum, is summed in the
run's form of BatchNorm's sums (:mod:`.forms.sums`; ``matvec`` unless a
CPU kind ships or a run measures another): MobileNetV2's step (Intel Xeon,
batch 32 in two parts) went from 3.1 to 1.1 s.

``once`` passes every other convolution's input through
:func:`computed_once`, for the engine's ``once`` form (:mod:`.forms.conv_inputs`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from .batchnorm import ChannelSum
from .forms.sums import matvec
from .taps import strided_taps

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
    (oh, ow), tap = strided_taps(lhs, rhs.shape[:2], strides, padding)
    kept = [(i, j) for i in range(kh) for j in range(kw)
            if _reaches_data(i, oh, strides[0], top, lhs.shape[1])
            and _reaches_data(j, ow, strides[1], left, lhs.shape[2])]
    patches = jnp.concatenate([tap(i, j) for i, j in kept], axis=-1)
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


def conv_general_dilated(lhs: jax.Array, rhs: jax.Array, window_strides: Sequence[int], padding: Any,
                         lhs_dilation: Any = None, rhs_dilation: Any = None, dimension_numbers: Any = None,
                         feature_group_count: int = 1, precision: Any = None, *, once: bool = False,
                         channel_sum: ChannelSum = matvec, **kwargs: Any) -> jax.Array:
    """``lax.conv_general_dilated``, with tiny-output 2-D convolutions as a matrix product and depthwise ones as
    their taps (whose weight gradients ``channel_sum`` sums: the run's form of BatchNorm's sums). ``once``: the
    input written once (:func:`computed_once`; a depthwise convolution writes its own)."""
    if _depthwise(lhs, rhs, lhs_dilation, dimension_numbers, feature_group_count, padding, kwargs):
        return depthwise_taps(lhs, rhs, window_strides, padding, rhs_dilation, channel_sum)
    if once:
        lhs = computed_once(lhs)
    if (lhs.ndim == 4 and dimension_numbers == _NHWC_HWIO and feature_group_count == 1 and not kwargs
            and _trivial(lhs_dilation) and _trivial(rhs_dilation) and not isinstance(padding, str)
            and _output_smaller_than_kernel(lhs, rhs, window_strides, padding)):
        return patches_matmul(lhs, rhs, window_strides, padding, precision)
    return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                    rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                                    feature_group_count=feature_group_count, precision=precision, **kwargs)


def _depthwise(lhs: jax.Array, rhs: jax.Array, lhs_dilation: Any, dimension_numbers: Any, groups: int,
               padding: Any, kwargs: dict[str, Any]) -> bool:
    """One filter per channel (and one output per channel), NHWC x HWIO, float32 or float64 (bfloat16 keeps the
    convolution's float32 accumulation)."""
    return (lhs.ndim == 4 and dimension_numbers == _NHWC_HWIO and groups > 1 and groups == lhs.shape[3]
            and rhs.shape[2] == 1 and rhs.shape[3] == groups and not kwargs and _trivial(lhs_dilation)
            and not isinstance(padding, str) and lhs.dtype in (jnp.float32, jnp.float64) and rhs.dtype == lhs.dtype)


def depthwise_taps(lhs: jax.Array, rhs: jax.Array, strides: Sequence[int], padding: Sequence[tuple[int, int]],
                   dilation: Any = None, channel_sum: ChannelSum = matvec) -> jax.Array:
    """A depthwise NHWC x HWIO convolution as its taps: each a strided slice of the padded input times the tap's
    weights (one per channel), added tap after tap; the input, the output and their gradients each written once."""
    return _depthwise_once(jnp.asarray(lhs), jnp.asarray(rhs), tuple(strides), tuple(tuple(p) for p in padding),
                           None if dilation is None else tuple(dilation), channel_sum)


def _tap_sum(lhs: jax.Array, rhs: jax.Array, strides: Sequence[int], padding: Sequence[tuple[int, int]],
             dilation: Any) -> jax.Array:
    _, tap = strided_taps(lhs, rhs.shape[:2], strides, padding, dilation)
    out = None
    for i in range(rhs.shape[0]):
        for j in range(rhs.shape[1]):
            term = tap(i, j) * rhs[i, j, 0]
            out = term if out is None else out + term
    return out


@partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5))
def _depthwise_once(lhs: jax.Array, rhs: jax.Array, strides: tuple, padding: tuple, dilation: Any,
                    channel_sum: ChannelSum) -> jax.Array:
    return _depthwise_forward(lhs, rhs, strides, padding, dilation, channel_sum)[0]


def _depthwise_forward(lhs: jax.Array, rhs: jax.Array, strides: tuple, padding: tuple, dilation: Any,
                       channel_sum: ChannelSum) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    x = _gathered(lhs)
    return _gathered(_tap_sum(x, rhs, strides, padding, dilation)), (x, rhs)


def _depthwise_backward(strides: tuple, padding: tuple, dilation: Any, channel_sum: ChannelSum,
                        saved: tuple[jax.Array, jax.Array], cotangent: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The input's gradient as the taps' own transpose; each tap's weight gradient, a sum over images and pixels
    of its slice times the output's gradient, as BatchNorm sums its channels."""
    x, rhs = saved
    g = _gathered(cotangent)
    dx = jax.vjp(lambda a: _tap_sum(a, rhs, strides, padding, dilation), x)[1](g)[0]
    _, tap = strided_taps(x, rhs.shape[:2], strides, padding, dilation)
    images = jnp.ones(g.shape[0], g.dtype)
    dw = jnp.stack([channel_sum(tap(i, j) * g, images) for i in range(rhs.shape[0]) for j in range(rhs.shape[1])])
    return _gathered(dx), dw.reshape(rhs.shape)


_depthwise_once.defvjp(_depthwise_forward, _depthwise_backward)
