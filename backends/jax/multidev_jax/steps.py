"""What one step computes on a device mesh: per-device code in ``shard_map``, then the AllReduce.

Each device runs the model on its own padded shard (``shard_map`` over the
mesh, parameters replicated), a device of several parts (:mod:`.parts`) its
shard cut into one piece per part. Each device differentiates its shard's
masked loss sum divided by B, the rows of the whole update (an input of the
step: micro-batches of an accumulated update divide by all of its rows), so
each shard weighs n_i / B, with respect to its own copy of the parameters;
the sum of those gradients over the mesh (allreduce.py) is the AllReduce of
contract: Loss, gradients and the update. The optimizer's update
(:mod:`.optimizers`) then runs replicated, identically on every device. A job
whose processes share a machine splits the train step in two instead
(``own_gradients``, then ``apply_summed``), the processes' gradients summed
between them through shared memory (parallel.py). Dropout's multipliers
(``drops``: node -> the core's masks, padded and sharded like ``x``) are a
part of the batch: a dict of arrays, empty for a model without Dropout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, reduce
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from multidev.engine import ModelSpec, Optimizer

from .allreduce import Rows, all_sum, device_mean, device_sum, split, vary
from .devices import AXIS
from .model import PRECISION, TF32, Compute, build
from .optimizers import transformation

SHARDED, REPLICATED = P(AXIS), P()


@dataclass(frozen=True)
class Steps:
    """The jitted functions of one recipe (model, BatchNorm mode, mesh, optimizer, compute); compiled per shard length.

    ``whole`` is B, the rows of the whole update, in the parameters' dtype.
    """

    #: (params, opt_state, stats, x, drops, y, sizes, lr, whole) -> (params, opt_state, stats, loss_sum, correct)
    train: Callable[..., Any]
    #: (params, opt_state, stats, held, x, drops, y, sizes, lr, whole, update) -> (params, opt_state, stats, held,
    #: loss_sum, correct): adds the gradient to ``held``; with ``update`` applies the sum and returns zeros
    accumulate: Callable[..., Any]
    #: (params, stats, x, drops, y, sizes, whole) -> gradient of the mean loss (running statistics untouched)
    gradients: Callable[..., Any]
    #: (params, stats, x, drops, y, sizes, whole) -> (each device's own gradient, its leaves sharded; loss_sum,
    #: correct, stats): the first half of a train step whose processes sum through shared memory (parallel.py)
    own_gradients: Callable[..., Any]
    #: (params, opt_state, every process's gradient as a flat vector, lr) -> (params, opt_state): the second half,
    #: which adds those up in rank order as it applies them
    apply_summed: Callable[..., Any]
    #: (params, stats, x, y, sizes) -> (logits, loss_sum, correct, count), inference mode
    evaluate: Callable[..., Any]
    #: the optimizer the train steps apply
    optimizer: optax.GradientTransformation


def _local_sums(logits: jax.Array, y: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Cross-entropy sum and correct count over this shard's real rows."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    loss_sum = jnp.sum(jnp.where(mask, ce, 0.0))
    return loss_sum, jnp.sum(mask & (jnp.argmax(logits, axis=-1) == y), dtype=jnp.int32)


def _sums(logits: jax.Array, y: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Cross-entropy sum and correct count over the real rows of every shard (psum over the mesh)."""
    loss_sum, correct = _local_sums(logits, y, mask)
    return lax.psum(loss_sum, AXIS), lax.psum(correct, AXIS)


def _variables(params: Any, stats: Any) -> dict[str, Any]:
    return {"params": params, "batch_stats": stats} if stats else {"params": params}


def compute(mesh: Mesh, precision: str, tf32: bool, conv_inputs: str = "fused") -> Compute:
    """The model's arithmetic for a setup: bf16 activations for precision bf16, TF32 only on GPUs and on request,
    convolution inputs written once where ``conv_inputs`` says so on CPUs."""
    platform = mesh.devices.flat[0].platform
    return Compute(cpu=platform == "cpu", dtype=jnp.bfloat16 if precision == "bf16" else None,
                   precision=TF32 if tf32 and platform == "gpu" else PRECISION,
                   inputs_once=platform == "cpu" and conv_inputs == "once")


@lru_cache(maxsize=None)
def steps(spec: ModelSpec, sync: bool, mesh: Mesh, optimizer: Optimizer = Optimizer(), precision: str = "fp32",
          tf32: bool = False, parts: int = 1, conv_inputs: str = "fused") -> Steps:
    """Build (once per recipe) the jitted train, accumulation, gradient and evaluation steps.

    ``parts``: the mesh's places per device (parts.py), BatchNorm's ``local`` statistics each device's over them.
    ``conv_inputs``: ``fused`` or ``once`` (conv_inputs.py).
    """
    model = build(spec, Rows(sync, parts, AXIS), compute(mesh, precision, tf32, conv_inputs))
    opt = transformation(optimizer)

    def own_gradients(params, stats, x, drops, y, size, whole):
        """This device's own gradient of its rows' share of the loss; the loss and statistics summed over the mesh."""
        mask = jnp.arange(x.shape[0]) < size[0]

        def shard_loss(own):
            logits, updates = model.apply(_variables(own, stats), x, mask, drops, mutable=["batch_stats"])
            loss_sum, correct = _local_sums(logits, y, mask)
            return loss_sum / whole, (loss_sum, correct, updates.get("batch_stats", stats))

        grads, (loss_sum, correct, new_stats) = jax.grad(shard_loss, has_aux=True)(vary(params, AXIS))
        if not sync:  # each device's own running statistics (alike on its parts): averaged over the devices with rows
            rows = size[0] if parts == 1 else device_sum(size[0], AXIS, parts)
            new_stats = device_mean(new_stats, rows > 0, AXIS)
        return grads, lax.psum(loss_sum, AXIS), lax.psum(correct, AXIS), new_stats

    def shard_gradients(*args):
        """This device's gradient summed over the mesh (allreduce.py: in buckets where the mesh spans processes)."""
        grads, *rest = own_gradients(*args)
        return all_sum(grads, AXIS, bucketed=len({d.process_index for d in mesh.devices.flat}) > 1), *rest

    def leaf_gradients(*args):
        grads, *rest = own_gradients(*args)
        return jax.tree.leaves(grads), *rest

    ins = (REPLICATED, REPLICATED) + (SHARDED,) * 4 + (REPLICATED,)
    grad = jax.shard_map(shard_gradients, mesh=mesh, out_specs=(REPLICATED,) * 4, in_specs=ins)
    own = jax.shard_map(leaf_gradients, mesh=mesh, out_specs=(SHARDED,) + (REPLICATED,) * 3, in_specs=ins)

    def apply(params, opt_state, grads, lr):
        updates, opt_state = opt.update(grads, optax.tree.set(opt_state, learning_rate=lr), params)
        return optax.apply_updates(params, updates), opt_state

    def apply_summed(params, opt_state, flats, lr):
        total = reduce(jnp.add, flats)  # ((a + b) + c) ...: the order of the processes' ranks
        leaves, treedef = jax.tree.flatten(params)
        return apply(params, opt_state, jax.tree.unflatten(treedef, split(total, leaves)), lr)

    def train(params, opt_state, stats, x, drops, y, sizes, lr, whole):
        grads, loss_sum, correct, new_stats = grad(params, stats, x, drops, y, sizes, whole)
        return *apply(params, opt_state, grads, lr), new_stats, loss_sum, correct

    def accumulate(params, opt_state, stats, held, x, drops, y, sizes, lr, whole, update):
        grads, loss_sum, correct, new_stats = grad(params, stats, x, drops, y, sizes, whole)
        held = optax.tree.add(held, grads)
        params, opt_state, held = lax.cond(
            update, lambda: (*apply(params, opt_state, held, lr), optax.tree.zeros_like(held)),
            lambda: (params, opt_state, held))
        return params, opt_state, new_stats, held, loss_sum, correct

    def gradients(params, stats, x, drops, y, sizes, whole):
        return grad(params, stats, x, drops, y, sizes, whole)[0]

    def shard_evaluate(params, stats, x, y, size):
        mask = jnp.arange(x.shape[0]) < size[0]
        logits = model.apply(_variables(params, stats), x, None)
        loss_sum, correct = _sums(logits, y, mask)
        return logits, loss_sum, correct, lax.psum(size[0], AXIS)

    evaluate = jax.shard_map(shard_evaluate, mesh=mesh, in_specs=(REPLICATED, REPLICATED, SHARDED, SHARDED, SHARDED),
                             out_specs=(SHARDED, REPLICATED, REPLICATED, REPLICATED))
    replicated = NamedSharding(mesh, REPLICATED)
    return Steps(train=jax.jit(train, donate_argnums=(0, 1, 2), out_shardings=replicated),
                 accumulate=jax.jit(accumulate, donate_argnums=(0, 1, 2, 3), out_shardings=replicated),
                 gradients=jax.jit(gradients, out_shardings=replicated),
                 own_gradients=jax.jit(own, donate_argnums=(1,)),
                 apply_summed=jax.jit(apply_summed, donate_argnums=(0, 1), out_shardings=replicated),
                 evaluate=jax.jit(evaluate), optimizer=opt)
