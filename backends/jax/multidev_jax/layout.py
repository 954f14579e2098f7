"""Canonical arrays to Flax variables and back, exactly.

The core's layout is OIHW convolutions and (out, in) dense weights; Flax
wants HWIO kernels and (in, out) dense kernels under ``params``, and keeps
running statistics under ``batch_stats``. Module paths equal the canonical
names, so only the leaf name and the axis order change; transposes are exact.
Leaves keep their canonical names (the engine's BatchNorm writes ``gamma``,
``running_mean``, ...) except kernels and LayerNorm, which keeps Flax's names (``scale``, ``bias``).
The engine's own token modules (:mod:`.tokens`) hold the core's arrays as
they are: the attention's ``in_weight`` and ``out_weight`` keep their names
and torch's (out, in) layout.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from multidev.engine import ModelSpec, Param, State
from multidev.nn.layers import LayerNorm, MultiHeadAttention, WindowAttention

Variables = dict[str, Any]  # {"params": nested dict, "batch_stats": nested dict}

_TO_FLAX = {"conv": (2, 3, 1, 0), "dense": (1, 0)}    # OIHW -> HWIO, (out, in) -> (in, out)
_FROM_FLAX = {"conv": (3, 2, 0, 1), "dense": (1, 0)}
#: Flax's leaf names where a layer of Flax's own names its parameters otherwise
_LEAVES: dict[type, dict[str, str]] = {LayerNorm: {"gamma": "scale", "beta": "bias"}}
#: layers whose modules hold their dense weights as the core does (tokens.py), not as Flax's kernels
_AS_THE_CORE: frozenset[type] = frozenset({MultiHeadAttention, WindowAttention})


def collection(param: Param) -> str:
    return "params" if param.trainable else "batch_stats"


def kernel(param: Param, layer: type = object) -> bool:
    """Whether Flax holds the array as a kernel (turned, under ``kernel``): Flax's own Conv's and Dense's."""
    return param.role in _TO_FLAX and layer not in _AS_THE_CORE


def path(param: Param, layer: type = object) -> tuple[str, ...]:
    """Flax path of a canonical name: ``stage2.block1.conv1.weight`` -> ``(stage2, block1, conv1, kernel)``.

    ``layer``: the class (of ``multidev.nn``) of the node that holds the parameter.
    """
    *modules, leaf = param.name.split(".")
    return (*modules, "kernel" if kernel(param, layer) else _LEAVES.get(layer, {}).get(leaf, leaf))


def row_axis(param: Param, turned: bool) -> int:
    """The Flax axis that holds canonical axis 0 (a kernel's output channels), -1 for an array without rows: the
    axis a sharded run cuts into its devices' rows."""
    if not param.shape:
        return -1
    return _TO_FLAX[param.role].index(0) if turned else 0


def flax_shape(param: Param, turned: bool) -> tuple[int, ...]:
    """The array's shape as Flax holds it."""
    return tuple(param.shape[i] for i in _TO_FLAX[param.role]) if turned else tuple(param.shape)


def paths(spec: ModelSpec) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Every canonical name's Flax path, and whether it is a kernel (:func:`kernel`)."""
    layers = {node.name: type(node.layer) for node in spec.graph.nodes}
    owners = {p.name: layers.get(p.name.rpartition(".")[0], object) for p in spec.params()}
    return {p.name: (path(p, owners[p.name]), kernel(p, owners[p.name])) for p in spec.params()}


def to_flax(spec: ModelSpec, state: State, dtype=np.float32, trainable_only: bool = False) -> Variables:
    """Canonical state -> ``{"params": ..., "batch_stats": ...}`` of numpy arrays in ``dtype``.

    ``trainable_only``: ``state`` holds parameter-shaped arrays alone (an optimizer slot), given under ``params``.
    """
    flat: dict[str, dict[tuple[str, ...], np.ndarray]] = {"params": {}, "batch_stats": {}}
    where = paths(spec)
    for p in spec.params():
        if trainable_only and not p.trainable:
            continue
        value = np.asarray(state[p.name], dtype)
        at, turned = where[p.name]
        flat[collection(p)][at] = np.ascontiguousarray(value.transpose(_TO_FLAX[p.role]) if turned else value)
    return {name: unflatten_dict(tree) for name, tree in flat.items()}


def from_flax(spec: ModelSpec, variables: Mapping[str, Any], trainable_only: bool = False) -> State:
    """Flax variables (or gradients, under ``params``) -> canonical state, in spec order."""
    flat = {name: flatten_dict(dict(tree)) if tree else {} for name, tree in variables.items()}
    state: State = {}
    where = paths(spec)
    for p in spec.params():
        if trainable_only and not p.trainable:
            continue
        at, turned = where[p.name]
        value = np.asarray(flat[collection(p)][at])
        state[p.name] = np.ascontiguousarray(value.transpose(_FROM_FLAX[p.role]) if turned else value)
    return state
