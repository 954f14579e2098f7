"""A window's taps: for each kernel offset, the strided slice of the padded input it reads in every window.

Depthwise convolutions, tiny-output convolutions (:mod:`.conv`) and max pools
(:mod:`.pools`) run on the CPU as sums, products or maxima of these slices,
which XLA fuses, where its own windowed operations are slow there.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax


def strided_taps(x: jax.Array, kernel: Sequence[int], strides: Sequence[int], padding: Sequence[tuple[int, int]],
                 dilation: Any = None, fill: float = 0.0) -> tuple[tuple[int, int], Callable[[int, int], jax.Array]]:
    """(the output's height and width, ``tap(i, j)``: the NHWC input's rows and columns kernel offset (i, j) reads,
    strided, one per output pixel), the input padded with ``fill``."""
    kh, kw = kernel
    dh, dw = dilation or (1, 1)
    x = jnp.pad(x, ((0, 0), tuple(padding[0]), tuple(padding[1]), (0, 0)), constant_values=fill)
    oh = (x.shape[1] - dh * (kh - 1) - 1) // strides[0] + 1
    ow = (x.shape[2] - dw * (kw - 1) - 1) // strides[1] + 1

    def tap(i: int, j: int) -> jax.Array:
        return lax.slice(x, (0, i * dh, j * dw, 0),
                         (x.shape[0], i * dh + (oh - 1) * strides[0] + 1, j * dw + (ow - 1) * strides[1] + 1,
                          x.shape[3]), (1, strides[0], strides[1], 1))
    return (oh, ow), tap
