"""The core's optimizers (multidev.rules.optimizers) as optax transformations, and their state in canonical names.

The transformation's learning rate is an input of the compiled step
(``optax.inject_hyperparams``), so a schedule changes it without a
recompile. Its state is a tree of optax's own; :func:`read_state` and
:func:`write_state` turn it into canonical names and back, through the same
layout as the parameters (:mod:`.layout`).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax

from multidev.engine import STEP, ModelSpec, Optimizer, State, slot_name

from .layout import from_flax, to_flax

#: canonical slot -> the field of optax's state that holds it (the update count is every ``count``)
SLOTS = {"momentum": "trace", "m": "mu", "v": "nu"}


def transformation(optimizer: Optimizer) -> optax.GradientTransformation:
    """The contract's ``optimizer`` from optax's own parts, its learning rate an input of the compiled step.

    sgd: the decay is coupled, added to the gradient ahead of optax's momentum
    ``trace`` (b = m * b + g; g + m * b with Nesterov), as optax.sgd alone has
    none. adamw: optax.adamw, its eps outside the square root of v_hat, its
    decoupled decay scaled by the learning rate. Every parameter is decayed.
    """
    def rule(learning_rate: Any) -> optax.GradientTransformation:
        if optimizer.name == "adamw":
            b1, b2 = optimizer.betas
            return optax.adamw(learning_rate, b1, b2, optimizer.eps, weight_decay=optimizer.weight_decay)
        decay = [optax.add_decayed_weights(optimizer.weight_decay)] if optimizer.weight_decay else []
        return optax.chain(*decay, optax.sgd(learning_rate, optimizer.momentum or None, optimizer.nesterov))

    return optax.inject_hyperparams(rule)(learning_rate=0.0)


def read_state(host: Any, optimizer: Optimizer, spec: ModelSpec) -> State:
    """One device's optax state (numpy leaves) in canonical names: the update count, then each slot."""
    state: State = {STEP: np.array(_counts(host)[0], np.int64)}
    for slot in optimizer.slots:
        tree = optax.tree.get(host, SLOTS[slot])
        state.update({slot_name(slot, name): value for name, value in
                      from_flax(spec, {"params": tree}, trainable_only=True).items()})
    return state


def write_state(transform: optax.GradientTransformation, optimizer: Optimizer, spec: ModelSpec, state: State,
                params: Any, dtype: np.dtype) -> Any:
    """``transform``'s state for parameters shaped as ``params``, holding canonical ``state`` (numpy leaves)."""
    slots = {SLOTS[slot]: to_flax(spec, {p: state[slot_name(slot, p)] for p in spec.trainable()},
                                  dtype, trainable_only=True)["params"] for slot in optimizer.slots}
    host = transform.init(jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), params))
    host = _with_counts(optax.tree.set(host, **slots) if slots else host, int(state[STEP]))
    return jax.tree.map(np.asarray, host)


def _is_count(path: tuple[Any, ...]) -> bool:
    """A ``count`` field of optax's state: inject_hyperparams' and adam's both count the updates done."""
    return getattr(path[-1], "name", None) == "count"


def _counts(tree: Any) -> list[Any]:
    return [leaf for path, leaf in jax.tree.leaves_with_path(tree) if _is_count(path)]


def _with_counts(tree: Any, step: int) -> Any:
    """``tree`` with every update count set to ``step`` (optax.tree.set stops at the outermost one it finds)."""
    return jax.tree.map_with_path(
        lambda path, leaf: np.asarray(step, np.asarray(leaf).dtype) if _is_count(path) else leaf, tree)
