"""Sharded data parallelism (contract: Sharding): each device keeps only its rows, ZeRO's stages on JAX's mesh.

Why: a replicated run keeps the whole optimizer state, gradient and parameters on every device; each level here
keeps one more of them as its owners' rows alone (the core's rule, ``multidev.rules.sharding``: ``ceil(n / k)``
rows of canonical axis 0 per device in job order, on the Flax axis that holds it, :func:`.layout.row_axis`).
How: a sharded array is one global ``jax.Array`` whose row axis is padded to ``k * ceil(n / k)`` (XLA's shardings
want equal parts: ``padded_shards``) and laid out by a ``NamedSharding`` with ``PartitionSpec`` naming the mesh
axis on it, so device i's shard is its rows. Inside ``jax.shard_map`` the steps move rows with collectives:

- ``optimizer``: the gradient is all-reduced as in the replicated run (``lax.psum``); each device slices its rows
  of the parameters and gradient, runs optax's update on them and its own slots, and ``lax.all_gather``
  (invariant, a bucket of parameters at a time: :func:`gather_all`) hands every device the whole parameters
  again;
- ``gradients``: the gradient is reduce-scattered instead (``lax.psum_scatter``): each device gets its rows' sum;
- ``parameters``: the parameters stay as rows between steps, gathered (``lax.all_gather``) inside each step,
  one parameter at a time, each where the forward needs it (in buckets, ResNet-18's step on 4 CPU devices took
  1.15 times the replicated one, one by one 1.02-1.03).

With 2 devices every sum adds the same two numbers, and optax's updates act row by row, so a run's bits are the
replicated run's. A sharded run runs each named device whole (one part) and sums through XLA's collectives,
never the engine's shared memory between processes: simpler, and its steps are one program.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.traverse_util import unflatten_dict
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from multidev.engine import ModelSpec, Optimizer, padded_rows, sharded_parts

from .allreduce import BUCKET, Rows, buckets
from .devices import AXIS
from .forms import Forms
from .layout import flax_shape, paths, row_axis
from .model import build
from .optimizers import SLOTS, transformation
from .steps import GRADIENT_IN, REPLICATED, Steps, composed, compute, evaluation, own_gradient, \
    summed_gradient, update



def _gather(a: jax.Array, axis: int) -> jax.Array:
    """JAX's gather whose result every device holds alike (replicated out of shard_map): ``all_gather_invariant``
    in JAX 0.7, ``all_gather(to="invarying")`` from 0.10."""
    if hasattr(lax, "all_gather_invariant"):
        return lax.all_gather_invariant(a, AXIS, axis=axis, tiled=True)
    return lax.all_gather(a, AXIS, axis=axis, tiled=True, to="invarying")


@dataclass(frozen=True)
class Cut:
    """How an array is split between its owners: the Flax axis of its rows and how many (axis -1: kept whole)."""

    axis: int = -1
    rows: int = 0

    @property
    def whole(self) -> bool:
        return self.axis < 0

    def spec(self) -> P:
        """Its ``PartitionSpec``: the mesh axis on its row axis, or replicated."""
        return P() if self.whole else P(*([None] * self.axis), AXIS)

    def padded(self, shape: Sequence[int], k: int) -> tuple[int, ...]:
        """The global array's shape: the rows padded to ``k`` equal parts of ``ceil(rows / k)``."""
        if self.whole:
            return tuple(shape)
        return tuple(k * padded_rows(self.rows, k) if i == self.axis else n for i, n in enumerate(shape))


WHOLE = Cut()


def param_cuts(spec: ModelSpec) -> tuple[Any, Any]:
    """The trainable parameters' cuts and their whole Flax shapes (``jax.ShapeDtypeStruct``), as Flax trees."""
    where, cuts, shapes = paths(spec), {}, {}
    for p in spec.params():
        if p.trainable:
            at, turned = where[p.name]
            cuts[at] = Cut(row_axis(p, turned), p.shape[0] if p.shape else 0)
            shapes[at] = jax.ShapeDtypeStruct(flax_shape(p, turned), np.float32)
    return unflatten_dict(cuts), unflatten_dict(shapes)


def opt_cuts(opt_state: Any, cuts: Any, optimizer: Optimizer) -> Any:
    """Cuts of optax's state: each slot (momentum, m, v) cut as its parameters; counts and the rate kept whole."""
    whole = jax.tree.map(lambda _: WHOLE, opt_state)
    return optax.tree.set(whole, **{SLOTS[slot]: cuts for slot in optimizer.slots}) if optimizer.slots else whole


def specs(cuts: Any) -> Any:
    return jax.tree.map(Cut.spec, cuts)


def kept(cuts: Any, sharded: bool) -> Any:
    """``cuts`` where a level shards that part, else every array whole."""
    return cuts if sharded else jax.tree.map(lambda _: WHOLE, cuts)


# Inside shard_map: one device's rows -------------------------------------------------------------------------
def _pad(a: jax.Array, cut: Cut, k: int) -> jax.Array:
    widths = [(0, 0)] * a.ndim
    widths[cut.axis] = (0, k * padded_rows(cut.rows, k) - cut.rows)
    return jnp.pad(a, widths)


def own(a: jax.Array, cut: Cut, k: int) -> jax.Array:
    """This device's rows (padded) of a whole array every device holds: a slice, no communication."""
    if cut.whole:
        return a
    part = padded_rows(cut.rows, k)
    return lax.dynamic_slice_in_dim(_pad(a, cut, k), lax.axis_index(AXIS) * part, part, axis=cut.axis)


def gather(a: jax.Array, cut: Cut) -> jax.Array:
    """The whole array from every device's rows: ``all_gather`` along the row axis, the padding cut off."""
    if cut.whole:
        return a
    return lax.slice_in_dim(_gather(a, cut.axis), 0, cut.rows, axis=cut.axis)


def gather_all(tree: Any, cuts: Any, k: int, limit: int = BUCKET) -> Any:
    """Every cut leaf of ``tree`` made whole, as :func:`gather` does, with one ``all_gather`` per bucket of leaves
    (their rows raveled together, at most ``limit`` floats, as the AllReduce's buckets).

    XLA's CPU collectives cost far more per call than per byte: ResNet-18's 62 gathers a step made ``optimizer``
    on 4 CPU devices 1.10 times the replicated step, in buckets 1.01-1.07. A leaf whose rows are padded is
    gathered alone: sliced out of a bucket, it changed a later step's float64 bits.
    """
    leaves, treedef = jax.tree.flatten(tree)
    kinds = jax.tree.leaves(cuts)
    even = [i for i, c in enumerate(kinds) if not c.whole and c.rows % k == 0]
    out = [a if i in even else gather(a, c) for i, (a, c) in enumerate(zip(leaves, kinds))]
    for group in buckets([leaves[i].size for i in even], limit):
        members = [even[j] for j in group]
        every = _gather(jnp.concatenate([leaves[i].ravel() for i in members])[None], 0)  # (k, their rows)
        start = 0
        for i in members:
            a, c = leaves[i], kinds[i]
            part = every[:, start:start + a.size].reshape(k, *a.shape)
            out[i] = jnp.moveaxis(part, 0, c.axis).reshape(*a.shape[:c.axis], -1, *a.shape[c.axis + 1:])
            start += a.size
    return jax.tree.unflatten(treedef, out)


def scatter(a: jax.Array, cut: Cut, k: int) -> jax.Array:
    """This device's rows of the sum over the mesh of every device's array: ``psum_scatter`` (reduce-scatter)."""
    if cut.whole:
        return lax.psum(a, AXIS)
    return lax.psum_scatter(_pad(a, cut, k), AXIS, scatter_dimension=cut.axis, tiled=True)


# The steps -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardedSteps(Steps):
    """A level's steps (the replicated ones' signatures, its arrays cut as below) and its gathers to whole arrays."""

    level: str = "optimizer"
    #: the cuts of the parameters, of the gradient an update takes (and accumulates), and of optax's state
    params: Any = None
    grads: Any = None
    opt: Any = None
    #: the trainable parameters' whole Flax shapes
    shapes: Any = None
    #: (params) -> whole params, replicated; (opt_state) -> whole optax state, replicated (collectives)
    whole_params: Callable[..., Any] = None  # type: ignore[assignment]
    whole_opt: Callable[..., Any] = None  # type: ignore[assignment]


def gathering(mesh: Mesh, cuts: Any) -> Callable[..., Any]:
    """A tree of sharded arrays -> the whole arrays on every device (identity where nothing is cut)."""
    if all(c.whole for c in jax.tree.leaves(cuts)):
        return lambda tree: tree
    return jax.shard_map(lambda tree: jax.tree.map(gather, tree, cuts), mesh=mesh, in_specs=(specs(cuts),),
                         out_specs=REPLICATED)


def scattered_gradient(own_grad: Callable[..., Any], mesh: Mesh, params: Any, grads: Any) -> Callable[..., Any]:
    """Step 3, reduce-scattered: each device's gradient of the (gathered) parameters summed into its rows."""
    k = mesh.devices.size

    def per_device(tree, stats, x, drops, y, size, whole):
        grad, *rest = own_grad(jax.tree.map(gather, tree, params), stats, x, drops, y, size, whole)
        return jax.tree.map(lambda g, c: scatter(g, c, k), grad, grads), *rest
    return jax.shard_map(per_device, mesh=mesh, in_specs=(specs(params), *GRADIENT_IN[1:]),
                         out_specs=(specs(grads),) + (REPLICATED,) * 3)


def owned_update(apply: Callable[..., Any], mesh: Mesh, cuts: Any, level: str, opt: Any) -> Callable[..., Any]:
    """Step 4 on each device's rows: optax's update of its parameters' rows with its slots' rows; the parameters
    then gathered whole where the level keeps them so."""
    k, parts = mesh.devices.size, sharded_parts(level)
    params, grads = kept(cuts, parts["parameters"]), kept(cuts, parts["gradients"])

    def per_device(tree, opt_state, grad, lr):
        mine = tree if parts["parameters"] else jax.tree.map(lambda a, c: own(a, c, k), tree, cuts)
        rows = grad if parts["gradients"] else jax.tree.map(lambda g, c: own(g, c, k), grad, cuts)
        new, opt_state = apply(mine, opt_state, rows, lr)
        return (new if parts["parameters"] else gather_all(new, cuts, k)), opt_state
    return jax.shard_map(per_device, mesh=mesh, in_specs=(specs(params), specs(opt), specs(grads), REPLICATED),
                         out_specs=(specs(params), specs(opt)))


@lru_cache(maxsize=None)
def sharded_steps(spec: ModelSpec, sync: bool, mesh: Mesh, optimizer: Optimizer, precision: str, tf32: bool,
                  forms: Forms, level: str) -> ShardedSteps:
    """Build (once per recipe and level) the jitted steps of a sharded run, one part per device."""
    model = build(spec, Rows(sync, forms.parts, AXIS), compute(mesh, precision, tf32, forms))
    opt, parts = transformation(optimizer), sharded_parts(level)
    own_grad = own_gradient(model, sync, forms.parts)
    cuts, shapes = param_cuts(spec)
    params, grads = kept(cuts, parts["parameters"]), kept(cuts, parts["gradients"])
    opt_tree = opt_cuts(jax.eval_shape(opt.init, shapes), cuts, optimizer)
    summed = summed_gradient(own_grad, mesh)
    gradient = scattered_gradient(own_grad, mesh, params, grads) if parts["gradients"] else summed
    apply = owned_update(update(opt), mesh, cuts, level, opt_tree)
    train, accumulate = composed(gradient, apply)
    whole = gathering(mesh, params)

    def gradients(tree, stats, x, drops, y, sizes, total):
        return summed(whole(tree), stats, x, drops, y, sizes, total)[0]

    def evaluate(tree, stats, x, y, sizes):
        return evaluation(model, mesh)(whole(tree), stats, x, y, sizes)

    replicated = NamedSharding(mesh, REPLICATED)
    return ShardedSteps(train=jax.jit(train, donate_argnums=(0, 1, 2)),
                        accumulate=jax.jit(accumulate, donate_argnums=(0, 1, 2, 3)),
                        gradients=jax.jit(gradients, out_shardings=replicated), evaluate=jax.jit(evaluate),
                        optimizer=opt, own=own_grad, update=apply, mesh=mesh, level=level, params=params,
                        grads=grads, opt=opt_tree, shapes=shapes, whole_params=jax.jit(whole),
                        whole_opt=jax.jit(gathering(mesh, opt_tree)))


# On the host ------------------------------------------------------------------------------------------------
def place(tree: Any, cuts: Any, mesh: Mesh) -> Any:
    """Whole host arrays onto the mesh, each device given its rows (padded) or the whole where not cut; in a job,
    each process places only its own devices' parts (``make_array_from_callback``)."""
    k = mesh.devices.size

    def put(cut: Cut, a: Any) -> jax.Array:
        a = np.asarray(a)
        if not cut.whole:
            widths = [(0, 0)] * a.ndim
            widths[cut.axis] = (0, cut.padded(a.shape, k)[cut.axis] - a.shape[cut.axis])
            a = np.pad(a, widths)
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, cut.spec()), lambda index: a[index])
    return jax.tree.map(put, cuts, tree)


def zeros(shapes: Any, dtype: Any) -> Any:
    """Whole host zeros of the parameters' shapes (an accumulated gradient's start)."""
    return jax.tree.map(lambda s: np.zeros(s.shape, dtype), shapes)


def held_bytes(params: Any, opt_state: Any, optimizer: Optimizer,
               devices: Sequence[jax.Device]) -> list[dict[str, int]]:
    """Bytes of the trainable parameters and of the optimizer's slots each device holds, read from the arrays'
    shards on it (padding included; optax's counts and rate left out)."""
    slots = [optax.tree.get(opt_state, SLOTS[slot]) for slot in optimizer.slots]

    def on(tree: Any, device: jax.Device) -> int:
        return sum(s.data.nbytes for a in jax.tree.leaves(tree) for s in a.addressable_shards if s.device == device)
    return [{"parameters": on(params, d), "optimizer": on(slots, d)} for d in devices]
