"""What one step computes on a device mesh: per-device code in ``shard_map``, the AllReduce by autodiff.

Each device runs the model on its own padded shard (``shard_map`` over the
mesh axis, parameters replicated). The loss is the psum of the shards'
masked sums divided by the true batch size B, so each shard weighs n_i / B.
``jax.grad`` of that loss with respect to the replicated parameters makes
JAX emit the cross-device sum of the shards' gradients (the transpose of a
replicated input is a psum): the AllReduce of contract: Loss, gradients and the update, with no hand-written
communication. The SGD update then runs replicated, identically on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from multidev.engine import ModelSpec

from .devices import AXIS
from .model import build

#: Plain SGD whose learning rate is an input of the compiled step, so changing it never recompiles.
OPTIMIZER = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)

SHARDED, REPLICATED = P(AXIS), P()


@dataclass(frozen=True)
class Steps:
    """The jitted functions of one (model, BatchNorm mode, mesh); compiled per shard length by the caller."""

    #: (params, opt_state, stats, x, y, sizes, lr) -> (params, opt_state, stats, loss_sum, correct)
    train: Callable[..., Any]
    #: (params, stats, x, y, sizes) -> gradient of the mean loss (running statistics untouched)
    gradients: Callable[..., Any]
    #: (params, stats, x, y, sizes) -> (logits, loss_sum, correct, count), inference mode
    evaluate: Callable[..., Any]


def _sums(logits: jax.Array, y: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Cross-entropy sum and correct count over the real rows of every shard (psum over the mesh)."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    loss_sum = jnp.sum(jnp.where(mask, ce, 0.0))
    correct = jnp.sum(mask & (jnp.argmax(logits, axis=-1) == y), dtype=jnp.int32)
    return lax.psum(loss_sum, AXIS), lax.psum(correct, AXIS)


def _variables(params: Any, stats: Any) -> dict[str, Any]:
    return {"params": params, "batch_stats": stats} if stats else {"params": params}


@lru_cache(maxsize=None)
def steps(spec: ModelSpec, sync: bool, mesh: Mesh) -> Steps:
    """Build (once per model, mode and mesh) the jitted train, gradient and evaluation steps."""
    model = build(spec, sync, cpu=mesh.devices.flat[0].platform == "cpu")

    def shard_forward(params, stats, x, y, size):
        mask = jnp.arange(x.shape[0]) < size[0]
        logits, updates = model.apply(_variables(params, stats), x, mask, mutable=["batch_stats"])
        loss_sum, correct = _sums(logits, y, mask)
        return loss_sum, correct, lax.psum(size[0], AXIS), updates.get("batch_stats", stats)

    forward = jax.shard_map(shard_forward, mesh=mesh, in_specs=(REPLICATED, REPLICATED, SHARDED, SHARDED, SHARDED),
                            out_specs=(REPLICATED,) * 4)

    def mean_loss(params, stats, x, y, sizes):
        loss_sum, correct, total, new_stats = forward(params, stats, x, y, sizes)
        return loss_sum / jnp.maximum(total, 1), (loss_sum, correct, new_stats)

    grad = jax.grad(mean_loss, has_aux=True)

    def train(params, opt_state, stats, x, y, sizes, lr):
        grads, (loss_sum, correct, new_stats) = grad(params, stats, x, y, sizes)
        opt_state = opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": lr})
        updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, new_stats, loss_sum, correct

    def gradients(params, stats, x, y, sizes):
        return grad(params, stats, x, y, sizes)[0]

    def shard_evaluate(params, stats, x, y, size):
        mask = jnp.arange(x.shape[0]) < size[0]
        logits = model.apply(_variables(params, stats), x, None)
        loss_sum, correct = _sums(logits, y, mask)
        return logits, loss_sum, correct, lax.psum(size[0], AXIS)

    evaluate = jax.shard_map(shard_evaluate, mesh=mesh, in_specs=(REPLICATED, REPLICATED, SHARDED, SHARDED, SHARDED),
                             out_specs=(SHARDED, REPLICATED, REPLICATED, REPLICATED))
    replicated = NamedSharding(mesh, REPLICATED)
    return Steps(train=jax.jit(train, donate_argnums=(0, 1, 2), out_shardings=replicated),
                 gradients=jax.jit(gradients, out_shardings=replicated),
                 evaluate=jax.jit(evaluate))
