"""The split: a minibatch's shards onto the device mesh and back, and the state replicated on every device.

A batch lives as one global array sharded along the mesh axis. Shards can be
uneven (the core's split rule) or empty, but an array's shards cannot, so
every device's shard is padded to a common length (a multiple of
:data:`ALIGN`) and carries its true size; the steps mask the padding (see
:mod:`.steps`). Parameters, optimizer state and running statistics are
replicated arrays: each device holds its own copy. Dropout's multipliers,
drawn by the core for each training batch, travel with the images: padded
and sharded alike, one array per Dropout node. A device split into parts
(:mod:`.forms.parts`) holds its shard as that many pieces, one per JAX
device, each padded alike; its rows come back whole.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from multidev.engine import Setup, Shards

from .devices import AXIS, mesh, with_parts

#: Shard length is rounded up to a multiple of this. Ragged last batches and evaluation batches then
#: share compiled shapes, and small batches run the same per-device program shape on any device
#: count, which keeps k-device float32 results closest to one device's (XLA's convolution rounding
#: depends on the batch length). Costs at most ALIGN - 1 padded rows per device.
ALIGN = 8


def padded(sizes: Sequence[int]) -> int:
    """The longest shard's rows rounded up to a multiple of :data:`ALIGN` (at least one row)."""
    return -(-max(1, *sizes) // ALIGN) * ALIGN


@dataclass(frozen=True)
class Batch:
    """A minibatch on the mesh: part i holds rows ``[i * length, i * length + sizes[i])`` of ``x``, then padding.

    A part is a JAX device: a device of the user's, or one piece of it where it is split (:mod:`.forms.parts`).
    """

    x: jax.Array          # (k * length, C, H, W) float32, canonical NCHW; k: every part of the job
    #: Dropout node -> (k * length, *its input's shape) multipliers, NCHW, zeros for padding; {} for a model
    #: without Dropout, None where the core drew no masks (evaluation, prediction)
    drops: Optional[dict[str, jax.Array]]
    y: jax.Array          # (k * length,) int32; zeros for padding and unlabelled batches
    device_sizes: jax.Array  # (k,) int32: each part reads its own true size
    sizes: tuple[int, ...]   # this process's parts
    length: int
    labelled: bool
    total: int               # rows of this minibatch over the job
    whole: int               # B: rows of the whole update (Shards.batch), what each shard's loss sum is divided by


class Placement:
    """The run's devices as one mesh, each ``parts`` places of it: where batches and state live."""

    def __init__(self, setup: Setup, named: Sequence[jax.Device], parts: int) -> None:
        self.setup, self.named, self.parts = setup, tuple(named), parts  # named: every process's, rank-major
        self.places = self.named if parts == 1 else with_parts(self.named, parts)
        self.local = [d for d in self.places if d.process_index == jax.process_index()]
        self.mesh = mesh(self.places)
        self.replicated = NamedSharding(self.mesh, P())
        self.sharded = NamedSharding(self.mesh, P(AXIS))
        self.dropouts = setup.spec.dropouts()  # (node, rate, one sample's shape): where masks are needed
        self._device_sizes: dict[tuple[int, ...], jax.Array] = {}

    # State ------------------------------------------------------------------
    def replicate(self, tree: Any) -> Any:
        """The same host arrays on every device of the job (each process places its own copies)."""
        if self.setup.group.size == 1:
            return jax.device_put(tree, self.replicated)
        return jax.tree.map(lambda a: jax.make_array_from_callback(np.shape(a), self.replicated,
                                                                   lambda index: np.asarray(a)[index]), tree)

    def moved(self, tree: Any) -> Any:
        """Replicated arrays of another mesh moved onto this one, device to device."""
        return jax.device_put(tree, self.replicated)

    @staticmethod
    def on(tree: Any, device: jax.Device) -> Any:
        """Device ``device``'s own copy of every array in ``tree``, on the host."""
        def local(a: jax.Array) -> np.ndarray:
            return np.asarray(next(s.data for s in a.addressable_shards if s.device == device))
        return jax.tree.map(local, tree)

    # Shards -----------------------------------------------------------------
    def _global(self, local: np.ndarray, rows: int) -> jax.Array:
        """A batch-sharded array of ``rows`` rows from this process's part (all of it in a job of one)."""
        if self.setup.group.size == 1:
            return jax.device_put(local, self.sharded)
        return jax.make_array_from_process_local_data(self.sharded, local, (rows, *local.shape[1:]))

    @staticmethod
    def _rows(parts: Sequence[np.ndarray], sizes: Sequence[int], length: int, shape: tuple[int, ...],
              dtype: Any) -> np.ndarray:
        """This process's devices' parts, device i's at rows ``[i * length, i * length + n_i)``, zeros after them."""
        if all(n == length for n in sizes):  # even shards: no padding
            return np.concatenate(parts, dtype=dtype)
        out = np.zeros((len(sizes) * length, *shape), dtype)
        for i, n in enumerate(sizes):
            out[i * length:i * length + n] = parts[i]
        return out

    def _drops(self, shards: Shards, sizes: tuple[int, ...], length: int) -> Optional[dict[str, np.ndarray]]:
        """Each Dropout node's multipliers, padded as the images are ({} without Dropout; None: none drawn)."""
        if not self.dropouts:
            return {}
        if shards.masks is None:
            return None
        return {node: self._rows(self._cut(shards.masks[node]), sizes, length, shape, self.setup.np_dtype)
                for node, _, shape in self.dropouts}

    def _cut(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each device's rows in its parts, in order (the first parts a row longer where they do not divide)."""
        if self.parts == 1:
            return list(arrays)
        return [piece for a in arrays for piece in np.array_split(a, self.parts)]

    def _full_length(self) -> int:
        """A full batch's shard length (``setup.rows``), which a shorter batch pads to: an epoch's last batch and
        evaluation's then run the full batch's programs instead of compiling their own (and timing this CPU's
        forms again): 16 s of a 48 s first run of ResNet-18 on digits here."""
        rows = self.setup.rows
        return padded([-(-rows // len(self.places))]) if rows else 1

    def place(self, shards: Shards) -> Batch:
        """The core's shards (one per named device of this process) as one batch on the mesh."""
        x = self._cut(shards.x)
        sizes = tuple(len(a) for a in x)
        every = shards.group_sizes if shards.group_sizes is not None else sizes  # parts: a job is never split
        length = max(padded(every), self._full_length())  # one shard length over the job: one compiled program
        images = self._rows(x, sizes, length, self.setup.spec.in_shape, self.setup.np_dtype)
        labels = np.zeros(len(sizes) * length, np.int32) if shards.y is None else \
            self._rows(self._cut(shards.y), sizes, length, (), np.int32)
        drops = self._drops(shards, sizes, length)
        if every not in self._device_sizes:  # an epoch has two or three distinct splits: place each once
            self._device_sizes[every] = self._global(np.asarray(sizes, np.int32), len(every))
        rows = len(every) * length
        if drops is not None:
            drops = {node: self._global(mask, rows) for node, mask in drops.items()}
        return Batch(self._global(images, rows), drops, self._global(labels, rows), self._device_sizes[every], sizes,
                     length, shards.y is not None, sum(every), shards.batch)

    def held(self, array: jax.Array, batch: Batch) -> list[np.ndarray]:
        """This process's devices' rows of a batch-sharded array, padding cut off (a device's parts joined)."""
        held = {s.device: s.data for s in array.addressable_shards}
        pieces = [np.asarray(held[d])[:n] for d, n in zip(self.local, batch.sizes)]
        if self.parts == 1:
            return pieces
        return [np.concatenate(pieces[i:i + self.parts]) for i in range(0, len(pieces), self.parts)]

    def probe(self, shards: Shards) -> Shards:
        """``shards`` as a train step takes them: zero labels where there are none, Dropout keeping every value."""
        y = shards.y if shards.y is not None else tuple(np.zeros(n, np.int32) for n in shards.sizes)
        masks = shards.masks
        if masks is None and self.dropouts:
            masks = {node: tuple(np.ones((n, *shape), self.setup.np_dtype) for n in shards.sizes)
                     for node, _, shape in self.dropouts}
        return dataclasses.replace(shards, y=y, masks=masks)
