"""The AllReduce of a step's gradients: one psum per parameter in a process, a few flat buckets between processes.

The step differentiates each device's own loss with respect to its own copy
of the parameters (``vary``: no implicit psum) and sums the gradients here.
Within one process a psum per parameter costs little and leaves XLA each
gradient where the backward pass wrote it; gathering them into buckets first
costs a copy of every gradient (measured on the Intel Xeon, ResNet-18 on
digits, 2 devices: 2.9 s an epoch in buckets, 2.7 s a psum per parameter).
Between processes every psum is a gloo round trip over TCP (0.4-1 ms each
however small, and 176 psums of 62,500 floats take 2.4 times as long as 11 of
1,000,000), so there the gradients go in a few large flat buckets in the
backward pass's order (last layers first, as torch's DDP does). Either way the
sums are the same numbers: two shards' values added once, whichever array
holds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

#: floats per bucket (4 MB). Measured here (2 processes, ResNet-18, batch 128): buckets of 256 K floats, 1 M and
#: one bucket for everything all took 600-670 ms a step, within the noise; a psum per parameter took 740
BUCKET = 1 << 20


def vary(tree: Any, axis: str) -> Any:
    """``tree`` as a per-device value of the mesh, so that its gradient is each device's own (no psum); a value
    that already varies (parameters gathered inside the step by a sharded run) stays as it is, which newer JAX
    requires."""
    def one(a: Any) -> Any:
        if axis in varying_axes(a):
            return a
        return lax.pvary(a, axis) if hasattr(lax, "pvary") else lax.pcast(a, axis, to="varying")  # pvary's new name
    return jax.tree.map(one, tree)


def varying_axes(a: Any) -> frozenset:
    """The mesh axes a traced value varies over: ``vma`` in JAX 0.7, ``manual_axis_type.varying`` from 0.10."""
    kind = jax.typeof(a) if hasattr(jax, "typeof") else None
    manual = getattr(kind, "manual_axis_type", None)
    return frozenset(getattr(kind, "vma", None) or getattr(manual, "varying", None) or ())


def buckets(sizes: list[int], limit: int = BUCKET) -> list[list[int]]:
    """Leaf indices grouped in reverse order into runs of at most ``limit`` floats (a larger leaf alone)."""
    groups: list[list[int]] = []
    filled = limit
    for i in reversed(range(len(sizes))):
        if filled + sizes[i] > limit:
            groups.append([])
            filled = 0
        groups[-1].append(i)
        filled += sizes[i]
    return groups


def split(total: jax.Array, leaves: list[Any]) -> list[jax.Array]:
    """``total``, the leaves raveled one after another, cut back into arrays of the leaves' shapes."""
    out, start = [], 0
    for a in leaves:
        out.append(total[start:start + a.size].reshape(a.shape))
        start += a.size
    return out


def all_sum(tree: Any, axis: str, bucketed: bool, limit: int = BUCKET) -> Any:
    """Every leaf of ``tree`` summed over mesh axis ``axis``: a bucket of leaves per psum, or a psum per leaf."""
    if not bucketed:
        return jax.tree.map(lambda a: lax.psum(a, axis), tree)
    leaves, treedef = jax.tree.flatten(tree)
    out: list[Any] = [None] * len(leaves)
    for group in buckets([a.size for a in leaves], limit):
        total = lax.psum(jnp.concatenate([leaves[i].ravel() for i in group]), axis)
        for i, summed in zip(group, split(total, [leaves[i] for i in group])):
            out[i] = summed
    return jax.tree.unflatten(treedef, out)


def device_mean(tree: Any, active: jax.Array, axis: str) -> Any:
    """Mean of every leaf over the devices where ``active`` (one psum: the leaves and the device count)."""
    leaves, treedef = jax.tree.flatten(tree)
    if not leaves:
        return tree
    weight = active.astype(leaves[0].dtype)
    total = lax.psum(jnp.concatenate([a.ravel() * weight for a in leaves] + [weight[None]]), axis)
    count = jnp.maximum(total[-1], 1.0)
    return jax.tree.unflatten(treedef, [summed / count for summed in split(total, leaves)])


@dataclass(frozen=True)
class Rows:
    """The rows a per-device statistic covers: its shard's (over its parts, where it has several), or the batch's.

    A device split into parts (parts.py) is ``parts`` consecutive places of
    the mesh axis. Their shard's sums are gathered and added, not summed
    with a second mesh axis: a program over a two-axis mesh came out of
    JAX 0.7.1 differently under another ``PYTHONHASHSEED``, so a job's
    processes compiled different programs and waited for each other for ever.
    """

    sync: bool = False
    parts: int = 1
    axis: str = "data"

    def sum(self, tree: Any) -> Any:
        """Every leaf of ``tree`` summed over these rows: the same on every part that holds them."""
        if self.sync:
            return lax.psum(tree, self.axis)
        return tree if self.parts == 1 else device_sum(tree, self.axis, self.parts)


def device_sum(tree: Any, axis: str, parts: int) -> Any:
    """Each leaf summed over this place's device's ``parts`` places (consecutive along ``axis``), in their order."""
    mine = lax.axis_index(axis) // parts

    def own(a: jax.Array) -> jax.Array:
        every = lax.all_gather(a, axis)  # (places, *a.shape): small, a channel's sums
        return lax.dynamic_index_in_dim(every.reshape(-1, parts, *a.shape).sum(axis=1), mine, keepdims=False)
    return jax.tree.map(own, tree)
