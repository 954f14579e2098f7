"""BatchNorm with the project's conventions, for code that runs per device in ``shard_map``.

Every device holds a shard padded to a common length; ``mask`` marks its
real rows, so padding never enters a statistic. The statistics cover
``rows`` (``allreduce.Rows``): for ``local`` the device's shard (its own
sums, or its parts' added where it runs split: :mod:`.parts`), for ``sync``
the whole batch (``lax.psum`` over the mesh; the whole batch's gradient
too; contract: BatchNorm).
Running statistics are averaged over the devices whose shard is not empty
(by the step, every layer's in one psum: ``allreduce.device_mean``), so they
come out identical on every device (the same rule as the torch engine).
Flax's own ``nn.BatchNorm`` averages per-device means with equal weights,
which is wrong for uneven shards; hence this module.

The backward pass is written out (:func:`normalize`) so that every
per-channel sum, forward and backward, goes through one function, the run's
form of the sums (``channel_sum``: :mod:`.forms.sums`). XLA:CPU turns a
reduction over more than 32 elements into a reduce-window that an Intel Xeon
ran 10 to 15 times slower than the same sum as a matrix-vector product
(f32[64,28,28,64] to 64 sums: 10 ms against 0.7-1.0 ms; left to autodiff,
BatchNorm's five such sums per layer took 47% of a ResNet-18 step there),
while an AMD EPYC runs the reductions faster: forms/sums.py measures which.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from multidev.engine import BN_EPS, BN_MOMENTUM

from .allreduce import Rows

#: (activations, rows' weights) -> per channel (the last axis), the weighted sum over the rows and every other axis
ChannelSum = Callable[[jax.Array, jax.Array], jax.Array]


def _rows(weight: jax.Array, x: jax.Array) -> jax.Array:
    return weight.reshape((-1,) + (1,) * (x.ndim - 1))


def _forward(x: jax.Array, weight: jax.Array, gamma: jax.Array, beta: jax.Array, rows: Rows,
             channel_sum: ChannelSum, eps: float):
    per_row = x.size // (x.shape[0] * x.shape[-1]) if x.shape[0] else 1
    # the row count travels with the channel sums: one psum, not two
    sums = rows.sum(jnp.append(channel_sum(x, weight), jnp.sum(weight) * per_row))
    count = sums[-1]
    n = jnp.maximum(count, 1.0)
    mean = sums[:-1] / n
    centred = x - mean
    var = rows.sum(channel_sum(centred * centred, weight)) / n  # two passes
    # an empty shard's variance is 0: normalise its padding with 1 instead, so that rsqrt(eps) cannot blow it up
    # layer after layer. Padding rows stay finite and are never read (the statistics and the loss skip them)
    rstd = lax.rsqrt(jnp.where(count > 0, var, 1.0) + eps)
    xhat = centred * rstd
    return xhat * gamma + beta, (mean, var, count), (xhat, rstd, n)


@partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def normalize(x: jax.Array, weight: jax.Array, gamma: jax.Array, beta: jax.Array, rows: Rows,
              channel_sum: ChannelSum, eps: float = BN_EPS):
    """(gamma * x_hat + beta, (mean, biased variance, count)) over the rows with weight 1 of ``rows``; ``eps``
    inside the square root (the layer's own).

    The statistics are for the running averages only: their gradient is not
    defined (use them under ``lax.stop_gradient``).
    """
    out, stats, _ = _forward(x, weight, gamma, beta, rows, channel_sum, eps)
    return out, stats


def _normalize_fwd(x, weight, gamma, beta, rows, channel_sum, eps):
    out, stats, (xhat, rstd, n) = _forward(x, weight, gamma, beta, rows, channel_sum, eps)
    return (out, stats), (xhat, rstd, n, weight, gamma)


def _normalize_bwd(rows, channel_sum, eps, residuals, cotangents):
    """dx = gamma * rstd / n * (n * g - sum g - x_hat * sum g x_hat), sums over the real rows of ``rows``.

    gamma's and beta's cotangents are this part's own: the step differentiates
    each part's copy of the parameters and sums the gradients over the mesh
    itself (allreduce.py). dx needs the sums over ``rows``, as the statistics.
    Padding rows get a zero gradient: they enter no statistic.
    """
    xhat, rstd, n, weight, gamma = residuals
    g = cotangents[0]
    dbeta, dgamma = channel_sum(g, weight), channel_sum(g * xhat, weight)
    whole_dbeta, whole_dgamma = rows.sum((dbeta, dgamma))
    dx = (n * g - whole_dbeta - xhat * whole_dgamma) * (gamma * rstd / n)
    return dx * _rows(weight, g), jnp.zeros_like(weight), dgamma, dbeta


normalize.defvjp(_normalize_fwd, _normalize_bwd)


class BatchNorm(nn.Module):
    """Per-channel BatchNorm for NHWC or NC input, canonical parameter names.

    Call with ``mask`` (bool per row) in training, ``None`` in inference. In
    training it must run inside ``shard_map`` over mesh axis ``rows.axis``.
    """

    channel_sum: ChannelSum  # the run's form of the per-channel sums (forms/sums.py)
    rows: Rows = Rows()  # what the statistics cover (module docstring)
    eps: float = BN_EPS  # the layer's own (multidev.nn.BatchNorm), inside the square root
    momentum: float = BN_MOMENTUM  # torch's convention: running = (1 - momentum) * running + momentum * batch's

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
        channels, compute = x.shape[-1], x.dtype
        gamma = self.param("gamma", nn.initializers.ones, (channels,))
        beta = self.param("beta", nn.initializers.zeros, (channels,))
        # bfloat16 activations (precision bf16) are normalised in the parameters' float32: statistics of
        # bfloat16 sums would be too coarse, and the running statistics stay float32
        x = x.astype(jnp.promote_types(compute, gamma.dtype))
        running_mean = self.variable("batch_stats", "running_mean", jnp.zeros, (channels,))
        running_var = self.variable("batch_stats", "running_var", jnp.ones, (channels,))
        if mask is None:
            out = (x - running_mean.value) * (gamma * lax.rsqrt(running_var.value + self.eps)) + beta
            return out.astype(compute)
        out, stats = normalize(x, mask.astype(x.dtype), gamma, beta, self.rows, self.channel_sum, self.eps)
        # local statistics are this device's own (the same on its parts): the step averages every layer's running
        # statistics over the devices with rows at once (allreduce.device_mean); sync ones are the same everywhere
        mean, var, _ = (lax.stop_gradient(s) for s in stats)
        # running = (1 - m) * running + m * batch statistic, written as torch's lerp
        running_mean.value = running_mean.value + self.momentum * (mean - running_mean.value)
        running_var.value = running_var.value + self.momentum * (var - running_var.value)
        return out.astype(compute)
