"""BatchNorm's per-channel sums in the form this CPU runs fastest, measured once per CPU kind and shape.

XLA:CPU turns a sum over more than 32 elements into a reduce-window. On an
Intel Xeon that ran 10-15 times slower than the same sum written as
matrix-vector products (BatchNorm's sums were 47% of a ResNet-18 step); on an
AMD EPYC (Zen 4) the matrix-vector products are the slower form (293 ms of a
1.7 s step against 146 ms as reductions). No constant is right on both, so
the first time a run meets a shape the engine times both forms of it and
keeps the faster, in ``sums.json`` beside the compilation cache (whose
folder is per CPU kind); ``multidev backends`` says what was chosen.

``MULTIDEV_JAX_SUMS=matvec`` or ``reduce`` pins a form (the test suite pins
``matvec``, so that its results do not depend on a timing). A job of several
processes never measures: every process must compile the same program, so
each takes the form rank 0's machine has measured, ``matvec`` for shapes it
has not. GPUs always take ``matvec``: on an H100 the reductions gave the book's
float32 epoch no gain (6.3, 6.1 s against 6.2, 6.2).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from multidev.engine import pinned_form

from .choices import Kept

ENV = "MULTIDEV_JAX_SUMS"
FORMS = ("matvec", "reduce")
DEFAULT = "matvec"
_VECTOR = (((0,), (0,)), ((), ()))  # contract axis 0 of both operands
_kept = Kept("sums.json", FORMS)  # shape key -> form, as loaded and measured by this process
_forced: list[str] = []        # the form being measured


def matvec(a: jax.Array, weight: jax.Array) -> jax.Array:
    """Rows first (a weighted sum of a few dozen images), then the pixels: matrix-vector products at full precision."""
    rows, channels = a.shape[0], a.shape[-1]
    per_pixel = lax.dot_general(weight, a.reshape(rows, -1), _VECTOR, precision=lax.Precision.HIGHEST)
    per_pixel = per_pixel.reshape(-1, channels)
    ones = jnp.ones(per_pixel.shape[0], a.dtype)
    return lax.dot_general(ones, per_pixel, _VECTOR, precision=lax.Precision.HIGHEST)


def reduce(a: jax.Array, weight: jax.Array) -> jax.Array:
    """The weighted rows summed by XLA's own reduction."""
    return jnp.sum(a * weight.reshape((-1,) + (1,) * (a.ndim - 1)), axis=tuple(range(a.ndim - 1)))


_FUNCTIONS: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {"matvec": matvec, "reduce": reduce}


def _key(shape: tuple[int, ...], dtype: object) -> str:
    return f"{'x'.join(str(d) for d in shape)}:{np.dtype(dtype).name}"


def _measure(shape: tuple[int, ...], dtype: object, repeats: int = 5) -> str:
    """The form under which one BatchNorm layer, forward and backward as a step runs it, is faster on this shape.

    The whole layer, not the sums alone: in a step XLA fuses a reduction with
    the arithmetic around it, which a bare sum does not show (timed alone, the
    matrix-vector form won every ResNet-18 shape on an AMD EPYC; in the layer
    and in the step the reductions won the large ones).
    """
    from .allreduce import Rows
    from .batchnorm import normalize  # here: batchnorm imports this module

    rng = np.random.default_rng(0)
    cpu = jax.devices("cpu")[0]
    x, target = (jax.device_put(rng.normal(size=shape).astype(dtype), cpu) for _ in range(2))
    weight = jax.device_put(np.ones(shape[0], dtype), cpu)
    gamma, beta = (jax.device_put(np.full(shape[-1], v, dtype), cpu) for v in (1.0, 0.0))

    def loss(x, gamma, beta):
        out, _ = normalize(x, weight, gamma, beta, Rows(), True)
        return jnp.sum(jax.nn.relu(out) * target)

    best: dict[str, float] = {}
    for name in FORMS:
        _forced.append(name)
        try:
            layer = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
            jax.block_until_ready(layer(x, gamma, beta))
        finally:
            _forced.pop()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(layer(x, gamma, beta))
            times.append(time.perf_counter() - start)
        best[name] = min(times)
    return min(best, key=best.__getitem__)


def pinned() -> Optional[str]:
    """The form ``MULTIDEV_JAX_SUMS`` fixes, or None: measure (or take what was measured)."""
    return pinned_form(ENV, FORMS)


def form(shape: tuple[int, ...], dtype: object, cpu: bool) -> str:
    """The form of the sums over ``shape`` (rows first, channels last) on this machine."""
    if _forced:
        return _forced[-1]
    fixed = pinned()
    if fixed:
        return fixed
    if not cpu:
        return DEFAULT
    key = _key(shape, dtype)
    if jax.process_count() > 1:
        return _kept.agreed(key, DEFAULT)
    chosen = _kept.get(key)
    if chosen is None:
        with jax.ensure_compile_time_eval():  # measured now, outside the step being traced
            chosen = _measure(shape, dtype)
        _kept.put(key, chosen)
    return chosen


def channel_sum(a: jax.Array, weight: jax.Array, cpu: bool = True) -> jax.Array:
    """Per channel (last axis), the sum over rows weighted by ``weight`` and over every other axis."""
    return _FUNCTIONS[form(a.shape, a.dtype, cpu)](a, weight)


def note() -> str:
    """What ``multidev backends`` says of the sums."""
    fixed = pinned()
    if fixed:
        return f"{fixed} ({ENV}={fixed})"
    return _kept.summary("per shape at a run's first step", ENV)
