"""BatchNorm with the project's conventions, for code that runs per device in ``shard_map``.

Every device holds a shard padded to a common length; ``mask`` marks its
real rows, so padding never enters a statistic. ``local`` normalises with the
shard's own statistics; ``sync`` adds the shards' sums with ``lax.psum`` over
the mesh axis, so every device normalises with the whole batch's statistics
and autodiff through the psum gives the exact whole-batch gradient (contract: BatchNorm).
Running statistics are averaged over the devices whose shard is not empty,
so they come out identical on every device (the same rule as the torch engine).
Flax's own ``nn.BatchNorm`` averages per-device means with equal weights,
which is wrong for uneven shards; hence this module.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from multidev.engine import BN_EPS, BN_MOMENTUM


def masked_moments(x: jax.Array, mask: jax.Array, axis: str, sync: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(mean, biased variance, count) per channel over the real rows: this shard's or the whole batch's."""
    weight = mask.astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1))
    dims = tuple(range(x.ndim - 1))  # all but the channel axis (NHWC or NC)
    per_row = x.size // (x.shape[0] * x.shape[-1]) if x.shape[0] else 1
    total, count = jnp.sum(x * weight, axis=dims), jnp.sum(weight) * per_row
    if sync:
        total, count = lax.psum(total, axis), lax.psum(count, axis)
    mean = total / jnp.maximum(count, 1.0)
    squares = jnp.sum(((x - mean) * weight) ** 2, axis=dims)  # two passes: no cancellation
    if sync:
        squares = lax.psum(squares, axis)
    return mean, squares / jnp.maximum(count, 1.0), count


def device_average(value: jax.Array, count: jax.Array, axis: str) -> jax.Array:
    """Mean of ``value`` over the devices with a non-empty shard (the same on every device)."""
    active = (count > 0).astype(value.dtype)
    return lax.psum(value * active, axis) / jnp.maximum(lax.psum(active, axis), 1.0)


class BatchNorm(nn.Module):
    """Per-channel BatchNorm for NHWC or NC input, canonical parameter names.

    Call with ``mask`` (bool per row) in training, ``None`` in inference. In
    training it must run inside ``shard_map`` over mesh axis ``axis``.
    """

    sync: bool = False
    axis: str = "data"

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
            mean, var = running_mean.value, running_var.value
        else:
            mean, var, count = masked_moments(x, mask, self.axis, self.sync)
            if not self.sync:  # sync statistics are already the same on every device
                batch_mean, batch_var = device_average(mean, count, self.axis), device_average(var, count, self.axis)
            else:
                batch_mean, batch_var = mean, var
            # running = (1 - m) * running + m * batch statistic, written as torch's lerp
            running_mean.value = running_mean.value + BN_MOMENTUM * (lax.stop_gradient(batch_mean) - running_mean.value)
            running_var.value = running_var.value + BN_MOMENTUM * (lax.stop_gradient(batch_var) - running_var.value)
            # an empty shard's variance is 0: normalise its padding with 1 instead, so that rsqrt(eps) cannot blow
            # it up layer after layer. Padding rows stay finite and are never read (masked statistics and loss);
            # a select over the whole output instead cost a third of the step's compile time (measured)
            var = jnp.where(count > 0, var, 1.0)
        out = (x - mean) * (gamma * lax.rsqrt(var + BN_EPS)) + beta
        return out.astype(compute)
