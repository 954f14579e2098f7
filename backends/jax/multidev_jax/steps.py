"""One data-parallel step as the book teaches it: split the batch, a gradient per device, the AllReduce, the update.

The recipe of d2l's "Multi-GPU training", on a JAX device mesh:

1. Split the minibatch: the batch arrives as one array sharded along the
   mesh axis (:mod:`.placing`), and ``jax.shard_map`` hands each device its
   own shard (padded to a common length: ``size`` says how many rows are
   real). The parameters are replicated: each device holds its own copy.
2. A gradient per device (:func:`own_gradient`): each device differentiates
   its shard's masked loss sum divided by B, the rows of the whole update (an
   input of the step: micro-batches of an accumulated update divide by all of
   its rows), so that each shard weighs n_i / B, with respect to its own copy
   of the parameters (``vary``: no implicit sum).
3. The AllReduce (:func:`summed_gradient`): those gradients summed over the
   mesh, ``lax.psum`` (:mod:`.allreduce`: in buckets where the mesh spans
   processes). Every device now holds the whole batch's gradient (contract:
   Loss, gradients and the update).
4. The update (:func:`update`): the optimizer (:mod:`.optimizers`) applied to
   every copy alike, replicated.

Everything else in :class:`Steps` is that recipe reused: gradient accumulation
(sum, then update on the last micro-batch), the gradient alone, evaluation.
BatchNorm's statistics are a device's own or the whole batch's (:class:`.allreduce.Rows`);
Dropout's multipliers (``drops``: node -> the core's masks, padded and sharded
like ``x``) are a part of the batch. ``forms`` (:mod:`.forms`) change how the
model computes, never what: a device may run as several parts of the mesh.
A job whose processes share a machine sums through shared memory instead
(:mod:`.shared_sum`), from :func:`own_gradient` and :func:`update`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from multidev.engine import ModelSpec, Optimizer

from .allreduce import Rows, all_sum, device_mean, device_sum, vary
from .devices import AXIS
from .forms import Forms
from .forms.sums import summing
from .model import PRECISION, TF32, Compute, build
from .optimizers import transformation

SHARDED, REPLICATED = P(AXIS), P()
#: the per-device gradient's arguments: (params, stats) replicated, (x, drops, y, size) sharded, whole replicated
GRADIENT_IN = (REPLICATED, REPLICATED) + (SHARDED,) * 4 + (REPLICATED,)


@dataclass(frozen=True)
class Steps:
    """The jitted functions of one recipe (model, BatchNorm mode, mesh, optimizer, compute, forms); compiled per
    shard length. ``whole`` is B, the rows of the whole update, in the parameters' dtype."""

    #: (params, opt_state, stats, x, drops, y, sizes, lr, whole) -> (params, opt_state, stats, loss_sum, correct)
    train: Callable[..., Any]
    #: (params, opt_state, stats, held, x, drops, y, sizes, lr, whole, update) -> (params, opt_state, stats, held,
    #: loss_sum, correct): adds the gradient to ``held``; with ``update`` applies the sum and returns zeros
    accumulate: Callable[..., Any]
    #: (params, stats, x, drops, y, sizes, whole) -> gradient of the mean loss (running statistics untouched)
    gradients: Callable[..., Any]
    #: (params, stats, x, y, sizes) -> (logits, loss_sum, correct, count), inference mode
    evaluate: Callable[..., Any]
    #: the optimizer the train steps apply
    optimizer: optax.GradientTransformation
    #: (params, stats, x, drops, y, size, whole) -> (own gradient, loss_sum, correct, stats), per device (step 2)
    own: Callable[..., Any]
    #: (params, opt_state, grads, lr) -> (params, opt_state): step 4
    update: Callable[..., Any]
    mesh: Mesh


def _local_sums(logits: jax.Array, y: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Cross-entropy sum and correct count over this shard's real rows."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    loss_sum = jnp.sum(jnp.where(mask, ce, 0.0))
    return loss_sum, jnp.sum(mask & (jnp.argmax(logits, axis=-1) == y), dtype=jnp.int32)


def _variables(params: Any, stats: Any) -> dict[str, Any]:
    return {"params": params, "batch_stats": stats} if stats else {"params": params}


def compute(mesh: Mesh, precision: str, tf32: bool, forms: Forms = Forms()) -> Compute:
    """The model's arithmetic for a setup: bf16 activations for precision bf16, TF32 only on GPUs and on request,
    convolution inputs and BatchNorm's sums in the run's forms on CPUs."""
    platform = mesh.devices.flat[0].platform
    return Compute(cpu=platform == "cpu", dtype=jnp.bfloat16 if precision == "bf16" else None,
                   precision=TF32 if tf32 and platform == "gpu" else PRECISION,
                   inputs_once=platform == "cpu" and forms.conv_inputs == "once", channel_sum=summing(forms.sums))


def own_gradient(model: nn.Module, sync: bool, parts: int) -> Callable[..., Any]:
    """Step 2, per device: its own gradient of its rows' share of the loss; the loss and statistics summed."""
    def gradient(params, stats, x, drops, y, size, whole):
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
    return gradient


def summed_gradient(own: Callable[..., Any], mesh: Mesh) -> Callable[..., Any]:
    """Step 3: every device's gradient summed over the mesh (the AllReduce), on the whole mesh."""
    bucketed = len({d.process_index for d in mesh.devices.flat}) > 1  # the mesh spans processes

    def per_device(*args):
        grads, *rest = own(*args)
        return all_sum(grads, AXIS, bucketed=bucketed), *rest
    return jax.shard_map(per_device, mesh=mesh, in_specs=GRADIENT_IN, out_specs=(REPLICATED,) * 4)


def update(opt: optax.GradientTransformation) -> Callable[..., Any]:
    """Step 4: the optimizer's update, its learning rate an input of the compiled step."""
    def apply(params, opt_state, grads, lr):
        updates, opt_state = opt.update(grads, optax.tree.set(opt_state, learning_rate=lr), params)
        return optax.apply_updates(params, updates), opt_state
    return apply


def evaluation(model: nn.Module, mesh: Mesh) -> Callable[..., Any]:
    """Inference on each device's shard: its logits, the loss and right answers summed over the mesh."""
    def per_device(params, stats, x, y, size):
        mask = jnp.arange(x.shape[0]) < size[0]
        logits = model.apply(_variables(params, stats), x, None)
        loss_sum, correct = _local_sums(logits, y, mask)
        return logits, lax.psum(loss_sum, AXIS), lax.psum(correct, AXIS), lax.psum(size[0], AXIS)
    return jax.shard_map(per_device, mesh=mesh, in_specs=(REPLICATED, REPLICATED, SHARDED, SHARDED, SHARDED),
                         out_specs=(SHARDED, REPLICATED, REPLICATED, REPLICATED))


def composed(gradient: Callable[..., Any], apply: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The train and accumulation steps from step 3 (``gradient``) and step 4 (``apply``), whatever their form."""
    def train(params, opt_state, stats, x, drops, y, sizes, lr, whole):
        grads, loss_sum, correct, new_stats = gradient(params, stats, x, drops, y, sizes, whole)
        return *apply(params, opt_state, grads, lr), new_stats, loss_sum, correct

    def accumulate(params, opt_state, stats, held, x, drops, y, sizes, lr, whole, now):
        grads, loss_sum, correct, new_stats = gradient(params, stats, x, drops, y, sizes, whole)
        held = optax.tree.add(held, grads)
        params, opt_state, held = lax.cond(
            now, lambda: (*apply(params, opt_state, held, lr), optax.tree.zeros_like(held)),
            lambda: (params, opt_state, held))
        return params, opt_state, new_stats, held, loss_sum, correct
    return train, accumulate


@lru_cache(maxsize=None)
def steps(spec: ModelSpec, sync: bool, mesh: Mesh, optimizer: Optimizer = Optimizer(), precision: str = "fp32",
          tf32: bool = False, forms: Forms = Forms()) -> Steps:
    """Build (once per recipe) the jitted train, accumulation, gradient and evaluation steps."""
    model = build(spec, Rows(sync, forms.parts, AXIS), compute(mesh, precision, tf32, forms))
    opt = transformation(optimizer)
    own = own_gradient(model, sync, forms.parts)
    gradient, apply = summed_gradient(own, mesh), update(opt)
    train, accumulate = composed(gradient, apply)

    def gradients(params, stats, x, drops, y, sizes, whole):
        return gradient(params, stats, x, drops, y, sizes, whole)[0]

    replicated = NamedSharding(mesh, REPLICATED)
    return Steps(train=jax.jit(train, donate_argnums=(0, 1, 2), out_shardings=replicated),
                 accumulate=jax.jit(accumulate, donate_argnums=(0, 1, 2, 3), out_shardings=replicated),
                 gradients=jax.jit(gradients, out_shardings=replicated),
                 evaluate=jax.jit(evaluation(model, mesh)), optimizer=opt, own=own, update=apply, mesh=mesh)
