"""The CPU's max pool as its window's taps against XLA's reduce_window: the same maxima, and the gradient to
the same (first) maximum of each window, ties included."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multidev_jax.parallel import x64
from multidev_jax.pools import max_taps

#: (kernel, stride, padding): torch's defaults, overlapping windows, four-sided and ceil_mode's extra positions
CASES = [(2, 2, ((0, 0), (0, 0))), (3, 2, ((1, 1), (1, 1))), (3, 1, ((0, 2), (1, 0))), (3, 3, ((0, 2), (0, 2)))]


@pytest.mark.parametrize("kernel, stride, padding", CASES)
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_max_taps_is_reduce_windows_max_and_gradient(kernel, stride, padding, ties):
    rng = np.random.default_rng(kernel * 10 + stride)
    x = rng.normal(size=(2, 9, 8, 3))
    if ties:
        x = np.maximum(np.round(x), 0.0)  # ReLU'd small integers: most windows hold their maximum twice or more
    with x64():
        _check(jnp.asarray(x), kernel, stride, padding, rng)


def _check(x, kernel, stride, padding, rng):
    def reference(a):
        return nn.max_pool(a, (kernel, kernel), strides=(stride, stride), padding=padding)

    def taps(a):
        return max_taps(a, kernel, stride, padding)

    want = reference(x)
    np.testing.assert_array_equal(taps(x), want)
    weights = jnp.asarray(rng.normal(size=want.shape))
    grad = jax.grad(lambda a, f: jnp.sum(f(a) * weights))
    np.testing.assert_array_equal(grad(x, taps), grad(x, reference))
