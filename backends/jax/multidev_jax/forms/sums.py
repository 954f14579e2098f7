"""BatchNorm's per-channel sums in the form this CPU runs fastest, measured once per CPU kind and shape.

XLA:CPU turns a sum over more than 32 elements into a reduce-window. On an
Intel Xeon that ran 10-15 times slower than the same sum written as
matrix-vector products (BatchNorm's sums were 47% of a ResNet-18 step); on an
AMD EPYC (Zen 4) the matrix-vector products are the slower form (293 ms of a
1.7 s step against 146 ms as reductions). A third form sidesteps the
reduce-window: each row's pixels summed a few at a time (no more than 32, a
plain loop XLA fuses with the arithmetic that makes them), then the smaller
rest (``staged``; on the Zen 4, f32[64,28,28,64] to 64 sums: 0.5 ms against
2.6 as a reduction and 0.9 as matrix-vector products). No constant is right
everywhere, so the first time a run meets a shape the engine times each form
of it and keeps the fastest, in ``sums.json`` beside the compilation cache
(whose folder is per CPU kind); ``multidev backends`` says what was chosen.

``MULTIDEV_JAX_SUMS=matvec``, ``reduce`` or ``staged`` pins a form (the test
suite pins ``matvec``, so that its results do not depend on a timing). In a
job of several processes every process must compile the same program, so
rank 0 measures a shape it has not measured before (with one thread per
operation where the run has one, as a worker with a core of its own) while
the others wait for its answer, and every process takes its form (a job's worker on the Zen 4,
8x8 images: 180 ms a step staged, 220 as matrix-vector products, which every
job took before). GPUs always take ``matvec``: on an H100 the reductions gave
the book's float32 epoch no gain (6.3, 6.1 s against 6.2, 6.2).

The run's form (:func:`summing`) is a function BatchNorm calls for each sum:
one of the three, or :func:`measured`, which picks one per shape while the
step is traced.
"""

from __future__ import annotations

import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..allreduce import Rows
from ..batchnorm import ChannelSum, normalize
from . import threads
from .choice import Choice

SUMS = Choice("MULTIDEV_JAX_SUMS", ("matvec", "reduce", "staged"), "sums.json", unmeasured="matvec",
              in_job="matvec", when="per shape at a run's first step")
_VECTOR = (((0,), (0,)), ((), ()))  # contract axis 0 of both operands
_WINDOW = 32  # XLA:CPU's tree reduction rewriter makes a reduce-window of a sum over more elements than this


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


def _chunk(n: int) -> int:
    """The largest divisor of ``n`` that XLA:CPU sums without a reduce-window (at most 32)."""
    return max(d for d in range(1, min(n, _WINDOW) + 1) if n % d == 0)


def staged(a: jax.Array, weight: jax.Array) -> jax.Array:
    """A few pixels of each row first (at most 32, which XLA sums in a plain loop), then the rest.

    The barrier keeps XLA from merging the two sums back into one reduce-window.
    The first stage reads the layer's activations once, fused with the arithmetic
    that makes them; the second sums an array smaller by the first stage's
    pixels (up to 32; 1 for a prime width over 32, where the form gains nothing).
    """
    x = a * weight.reshape((-1,) + (1,) * (a.ndim - 1))
    if a.ndim == 4:
        rows, height, width, channels = a.shape
        if height * width <= _WINDOW:
            x = jnp.sum(x, axis=(1, 2))
        else:
            d = _chunk(width)
            x = jnp.sum(x.reshape(rows, height, width // d, d, channels), axis=3)
        x = lax.optimization_barrier(x)
    return jnp.sum(x, axis=tuple(range(x.ndim - 1)))


FUNCTIONS: dict[str, ChannelSum] = {"matvec": matvec, "reduce": reduce, "staged": staged}


def key(shape: tuple[int, ...], dtype: object) -> str:
    """The shape, and the forms timed: a choice made before a form existed is made again."""
    return f"{'x'.join(str(d) for d in shape)}:{np.dtype(dtype).name}:{','.join(SUMS.forms)}"


def measure(shape: tuple[int, ...], dtype: object, repeats: int = 12) -> str:
    """The form under which one BatchNorm layer, forward and backward as a step runs it, is faster on this shape.

    The whole layer, not the sums alone: in a step XLA fuses a reduction with
    the arithmetic around it, which a bare sum does not show (timed alone, the
    matrix-vector form won every ResNet-18 shape on an AMD EPYC; in the layer
    and in the step the reductions won the large ones). The forms take turns,
    so that a slower moment of a shared machine does not fall on one form alone.
    """
    rng = np.random.default_rng(0)
    cpu = jax.local_devices(backend="cpu")[0]
    x, target = (jax.device_put(rng.normal(size=shape).astype(dtype), cpu) for _ in range(2))
    weight = jax.device_put(np.ones(shape[0], dtype), cpu)
    gamma, beta = (jax.device_put(np.full(shape[-1], v, dtype), cpu) for v in (1.0, 0.0))

    # one thread where the run has one
    options = threads.options(threads.THREADS.pinned() or threads.THREADS.unmeasured)

    def layer(form: str) -> jax.stages.Compiled:
        def loss(x, gamma, beta):
            out, _ = normalize(x, weight, gamma, beta, Rows(), FUNCTIONS[form])
            return jnp.sum(jax.nn.relu(out) * target)
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, gamma, beta).compile(options)

    layers = {form: layer(form) for form in SUMS.forms}
    for compiled in layers.values():
        jax.block_until_ready(compiled(x, gamma, beta))
    best = dict.fromkeys(SUMS.forms, float("inf"))
    for _ in range(repeats):
        for name, compiled in layers.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(x, gamma, beta))
            best[name] = min(best[name], time.perf_counter() - start)
    return min(best, key=best.__getitem__)


def form(shape: tuple[int, ...], dtype: object) -> str:
    """The form of the sums over ``shape`` (rows first, channels last) on this CPU: kept, else timed now where runs
    measure, else shipped (a job's processes take rank 0's)."""
    name = key(shape, dtype)

    def timed() -> str:
        with jax.ensure_compile_time_eval():  # measured now, outside the step being traced
            chosen = measure(shape, dtype)
        SUMS.kept.put(name, chosen)
        return chosen
    return SUMS.agreed(name, timed) if jax.process_count() > 1 else SUMS.chosen(name, timed)


def measured(a: jax.Array, weight: jax.Array) -> jax.Array:
    """The sums over ``a`` in the form measured for its shape (:func:`form`)."""
    return FUNCTIONS[form(a.shape, a.dtype)](a, weight)


def settled(cpu: bool) -> Optional[str]:
    """The run's form where one holds for every shape (a pin, GPUs), else None: each shape's measured form."""
    return SUMS.pinned() or (None if cpu else SUMS.unmeasured)


def summing(decided: Optional[str]) -> ChannelSum:
    """The function BatchNorm sums with: ``decided``'s form, or each shape's measured one (None)."""
    return measured if decided is None else FUNCTIONS[decided]
