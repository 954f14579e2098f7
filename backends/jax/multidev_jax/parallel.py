"""The model replicated over a JAX device mesh: split, train, evaluate, state in and out.

A batch lives as one global array sharded along the mesh axis. Shards can be
uneven (the core's split rule) or empty, but an array's shards cannot, so
every device's shard is padded to a common length (a multiple of
:data:`ALIGN`) and carries its true size; the steps mask the padding (see
:mod:`.steps`). Parameters, optimizer state and running statistics are
replicated arrays: each device holds its own copy, as is the gradient sum of
an accumulated update (one gradient-sized tree, made at the first micro-batch).
Dropout's multipliers, drawn by the core for each training batch, travel
with the images: padded and sharded alike, one array per Dropout node.
A device split into parts (:mod:`.parts`) holds its shard as that many
pieces, one per JAX device, each padded alike; its rows come back whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Any, Hashable, Optional, Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from multidev.engine import (HostSum, MultidevError, ReplicaStates, Setup, Shards, State, StepStats, check_state,
                             predictions)

from . import conv_inputs, optimizers, parts
from .compiled import Compiler
from .distributed import host_sum, peers
from .devices import AXIS, cpu_devices, job_devices, mesh, with_parts
from .layout import from_flax, to_flax
from .model import MISSING_MASKS
from .steps import steps
from .threads import best_seconds

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

    A part is a JAX device: a device of the user's, or one piece of it where it is split (:mod:`.parts`).
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


@dataclass(frozen=True)
class Sums:
    """A train step's loss sum and right answers, still on the device (``pending_stats``): reading them waits."""

    arrays: Sequence[jax.Array]
    total: int
    reports: bool

    def result(self) -> StepStats:
        loss_sum, correct = jax.device_get(self.arrays)  # one wait, one transfer
        if not self.reports:
            return StepStats(0.0, 0, 0)
        return StepStats(float(loss_sum), int(correct), self.total)


def x64() -> Any:
    """JAX's 64-bit mode for one block: ``jax.enable_x64`` in newer JAX, the experimental one before."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64
    return enable_x64()


def scoped(method):
    """Run a method with JAX's 64-bit mode as this replica set needs it (float64 runs only), a lost peer one line."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with peers(), (x64() if self.dtype == np.float64 else contextlib.nullcontext()):
            return method(self, *args, **kwargs)
    return wrapper


class JaxReplicas(ReplicaStates):
    def __init__(self, setup: Setup, state: State) -> None:
        self.setup, self.spec, self.sync, self.dtype = setup, setup.spec, setup.sync, setup.np_dtype
        self._named = tuple(job_devices(setup.devices, setup.group))  # every process's, rank-major
        #: the step's program besides shapes, devices and parts: what a choice of parts is kept for
        self._program = (self.spec, self.sync, setup.optimizer, setup.precision, setup.tf32, self.dtype)
        #: parts a device runs on if split (1: never); split or not is decided at the first batch (parts.py)
        self._split = parts.split_parts(list(self._named), setup.group.size, len(cpu_devices()))
        #: the parts a device runs on and the convolutions' inputs (conv_inputs.py); None: timed at the first batch
        self._parts = parts.settled(self._split)
        self._inputs = conv_inputs.settled(self.spec, list(self._named), setup.group.size)
        self._decided = self._parts is not None and self._inputs is not None
        #: the steps' sums are the job's (psum over the mesh): rank 0 reports them, the others report 0
        self._reports = setup.group.rank == 0
        self._compiler = Compiler()
        self._use(self._parts or 1, self._inputs or conv_inputs.DEFAULT)
        self._dropouts = self.spec.dropouts()  # (node, rate, one sample's shape): where masks are needed
        self._sum: Any = None  # the gradient summed over an update's micro-batches so far (None: never accumulated)
        if setup.group.size > 1:  # the step's psum spans the job: XLA's collectives, gloo between CPU processes
            self.process_sums = "XLA's collectives inside the compiled step"
        self._host: Optional[list[Optional[HostSum]]] = None  # the shared-memory sum, asked for at the first step
        self._reading: Any = None  # the last update through the shared memory (_train_shared)
        self.load_state(state)
        self.load_optimizer_state(setup.optimizer.init_state(self.spec, self.dtype))

    def _use(self, count: int, inputs: str) -> None:
        """Run on ``count`` parts a device, convolution inputs ``inputs``: the mesh, its steps and shardings, and
        the state moved onto them."""
        self.parts, self.inputs = count, inputs
        self._places = self._named if count == 1 else with_parts(self._named, count)
        self._local = [d for d in self._places if d.process_index == jax.process_index()]
        self.mesh = mesh(self._places)
        #: what the compiled steps depend on besides shapes
        self._recipe = (self.spec, self.sync, self.mesh, self.setup.optimizer, self.setup.precision, self.setup.tf32,
                        count, inputs)
        self._steps = steps(*self._recipe)
        self._replicated = NamedSharding(self.mesh, P())
        self._sharded = NamedSharding(self.mesh, P(AXIS))
        self._device_sizes: dict[tuple[int, ...], jax.Array] = {}
        if hasattr(self, "_params"):  # placed on another mesh before: moved, device to device
            self._params, self._opt_state, self._stats, self._sum = jax.device_put(
                (self._params, self._opt_state, self._stats, self._sum), self._replicated)

    def _decide(self, shards: Shards) -> None:
        """The convolutions' inputs, then whole or split, each by a train step timed each way on these shards
        (conv_inputs.py, parts.py); the time counts as compiling."""
        self._decided, start, compiling = True, time.perf_counter(), self._compiler.seconds
        probe = self._probe(shards)
        rate, whole = self.dtype.type(0.0), self.dtype.type(probe.batch)
        timed: dict[tuple[int, str], float] = {}  # each form timed once, whichever choice asks

        def timer(count: int, inputs: str):
            def seconds() -> float:
                if (count, inputs) not in timed:
                    self._use(count, inputs)
                    batch = self._place(probe)
                    args = (self._params, self._opt_state, self._stats, batch.x, batch.drops, batch.y,
                            batch.device_sizes, rate, whole)
                    timed[count, inputs] = best_seconds(self._compiled("train", batch, *args), args, repeats=3)
                return timed[count, inputs]
            return seconds

        length = padded(shards.sizes)
        if self._inputs is None:
            name = conv_inputs.key(len(self._named), length, self._program)
            self._inputs = conv_inputs.choose(name, {form: timer(1, form) for form in conv_inputs.FORMS})
        if self._parts is None:
            name = parts.key(len(self._named), self._split, length, (*self._program, self._inputs))
            form = parts.choose(name, {"whole": timer(1, self._inputs), "split": timer(self._split, self._inputs)})
            self._parts = self._split if form == "split" else 1
        self._use(self._parts, self._inputs)
        self._compiler.seconds = compiling + time.perf_counter() - start

    def _probe(self, shards: Shards) -> Shards:
        """``shards`` as a train step takes them: zero labels where there are none, Dropout keeping every value."""
        y = shards.y if shards.y is not None else tuple(np.zeros(n, np.int32) for n in shards.sizes)
        masks = shards.masks
        if masks is None and self._dropouts:
            masks = {node: tuple(np.ones((n, *shape), self.dtype) for n in shards.sizes)
                     for node, _, shape in self._dropouts}
        return dataclasses.replace(shards, y=y, masks=masks)

    @property
    def compile_seconds(self) -> float:
        return self._compiler.seconds

    @property
    def compile_cached(self) -> int:
        """Executables loaded from JAX's persistent compilation cache instead of compiled."""
        return self._compiler.cached

    def _compiled(self, name: str, batch: Batch, *args: Any) -> jax.stages.Compiled:
        key: Hashable = (name, *self._recipe, batch.length, self.dtype)
        return self._compiler.get(key, getattr(self._steps, name), *args)

    def _on(self, tree: Any, device: jax.Device) -> Any:
        """Device ``device``'s own copy of every array in ``tree``, on the host."""
        def local(a: jax.Array) -> np.ndarray:
            return np.asarray(next(s.data for s in a.addressable_shards if s.device == device))
        return jax.tree.map(local, tree)

    # Shard -----------------------------------------------------------------
    def _global(self, local: np.ndarray, rows: int) -> jax.Array:
        """A batch-sharded array of ``rows`` rows from this process's part (all of it in a job of one)."""
        if self.setup.group.size == 1:
            return jax.device_put(local, self._sharded)
        return jax.make_array_from_process_local_data(self._sharded, local, (rows, *local.shape[1:]))

    def _rows(self, parts: Sequence[np.ndarray], sizes: Sequence[int], length: int, shape: tuple[int, ...],
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
        if not self._dropouts:
            return {}
        if shards.masks is None:
            return None
        return {node: self._rows(self._cut(shards.masks[node]), sizes, length, shape, self.dtype)
                for node, _, shape in self._dropouts}

    def _cut(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each device's rows in its parts, in order (the first parts a row longer where they do not divide)."""
        if self.parts == 1:
            return list(arrays)
        return [piece for a in arrays for piece in np.array_split(a, self.parts)]

    @scoped
    def place(self, shards: Shards) -> Batch:
        k = len(self._local) // self.parts
        if len(shards.sizes) != k or len(shards.group_sizes or shards.sizes) != len(self._named):
            raise MultidevError(f"{len(shards.sizes)} shards for {k} devices: cut the batch with multidev.shard_sizes")
        if not self._decided:
            self._decide(shards)
        return self._place(shards)

    def _full_length(self) -> int:
        """A full batch's shard length (``setup.rows``), which a shorter batch pads to: an epoch's last batch and
        evaluation's then run the full batch's programs instead of compiling their own (and timing this CPU's
        forms again): 16 s of a 48 s first run of ResNet-18 on digits here."""
        rows = self.setup.rows
        return padded([-(-rows // len(self._places))]) if rows else 1

    def _place(self, shards: Shards) -> Batch:
        x = self._cut(shards.x)
        sizes = tuple(len(a) for a in x)
        every = shards.group_sizes if shards.group_sizes is not None else sizes  # parts: a job is never split
        length = max(padded(every), self._full_length())  # one shard length over the job: one compiled program
        images = self._rows(x, sizes, length, self.spec.in_shape, self.dtype)
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

    def _held(self, array: jax.Array, batch: Batch) -> list[np.ndarray]:
        """This process's devices' rows of a batch-sharded array, padding cut off (a device's parts joined)."""
        held = {s.device: s.data for s in array.addressable_shards}
        pieces = [np.asarray(held[d])[:n] for d, n in zip(self._local, batch.sizes)]
        if self.parts == 1:
            return pieces
        return [np.concatenate(pieces[i:i + self.parts]) for i in range(0, len(pieces), self.parts)]

    @scoped
    def shards(self, batch: Batch) -> list[np.ndarray]:
        return self._held(batch.x, batch)

    # Steps -----------------------------------------------------------------
    @staticmethod
    def _dropped(batch: Batch) -> dict[str, jax.Array]:
        """The batch's Dropout multipliers for a training pass: a model with Dropout cannot train without them."""
        if batch.drops is None:
            raise MultidevError(MISSING_MASKS)
        return batch.drops

    @scoped
    def train_step(self, batch: Batch, lr: float, *, update: bool = True, pending: bool = False
                   ) -> StepStats | Sums:
        rate, whole = self.dtype.type(lr), self.dtype.type(batch.whole)  # inputs of the step: no recompile
        drops = self._dropped(batch)
        shared = self._shared_sum() if update and self._sum is None else None
        if shared is not None:
            sums = self._train_shared(batch, drops, rate, whole, shared)
        elif update and self._sum is None:
            args = (self._params, self._opt_state, self._stats, batch.x, drops, batch.y, batch.device_sizes, rate,
                    whole)
            self._params, self._opt_state, self._stats, *sums = self._compiled("train", batch, *args)(*args)
        else:
            if self._sum is None:  # the first micro-batch: zeros, reused by every later update of the run
                self._sum = self._replicate(jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), self._params))
            args = (self._params, self._opt_state, self._stats, self._sum, batch.x, drops, batch.y,
                    batch.device_sizes, rate, whole, np.bool_(update))
            self._params, self._opt_state, self._stats, self._sum, *sums = \
                self._compiled("accumulate", batch, *args)(*args)
        held = Sums(tuple(sums), batch.total, self._reports)
        return held if pending else held.result()

    def _shared_sum(self) -> Optional[HostSum]:
        """The job's gradient sum through this machine's shared memory, opened at the first step (a collective)."""
        if self.setup.group.size == 1:
            return None
        if self._host is None:
            self._host = [host_sum(sum(a.size for a in jax.tree.leaves(self._params)), self.dtype, self.setup.group)]
            if self._host[0] is not None:
                self.process_sums = "shared memory"
        return self._host[0]

    def _train_shared(self, batch: Batch, drops: dict[str, jax.Array], rate: Any, whole: Any,
                      shared: HostSum) -> list[jax.Array]:
        """A train step in two programs, the gradient crossing the processes between them through ``shared``.

        XLA's gloo all-reduce inside the step sends the gradient through the
        loopback socket, gathered into buckets first; this way each process
        copies its own gradient's leaves into its slot, and the update reads
        every slot (no copy: ``may_alias`` on 64-byte aligned memory) and adds
        them as it goes. One barrier a step. Measured on the Intel Xeon
        (ResNet-18, digits, 2 processes): 213 ms a step against 286.
        """
        args = (self._params, self._stats, batch.x, drops, batch.y, batch.device_sizes, whole)
        leaves, loss_sum, correct, self._stats = self._compiled("own_gradients", batch, *args)(*args)
        # The update that read this slot set two steps ago is done: the slot is rewritten after the next barrier,
        # which the peers pass only once done too (their gradients wait for their updates; loaded state cuts that
        # chain, this wait does not)
        jax.block_until_ready(self._reading)
        self._into_slot(leaves, shared.slot())
        flats = tuple(jax.make_array_from_single_device_arrays(
            values.shape, self._replicated, [jax.device_put(values, d, may_alias=True) for d in self._local])
            for values in shared.gather())
        args = (self._params, self._opt_state, flats, rate)
        step = self._compiler.get(("apply_summed", *self._recipe, self.dtype), self._steps.apply_summed, *args)
        self._params, self._opt_state = step(*args)
        self._reading = self._opt_state  # this update's output: ready once it has read the slots
        return [loss_sum, correct]

    def _into_slot(self, leaves: list[jax.Array], slot: np.ndarray) -> None:
        """This process's devices' gradients added in device order (as a process sums its own), leaf after leaf."""
        start = 0
        for leaf in leaves:
            own = {s.device: np.asarray(s.data) for s in leaf.addressable_shards}
            first = own[self._local[0]]
            part = slot[start:start + first.size].reshape(first.shape)
            np.copyto(part, first)
            for device in self._local[1:]:
                np.add(part, own[device], out=part)
            start += first.size

    @scoped
    def gradients(self, batch: Batch) -> State:
        args = (self._params, self._stats, batch.x, self._dropped(batch), batch.y, batch.device_sizes,
                self.dtype.type(batch.whole))
        grads = self._compiled("gradients", batch, *args)(*args)
        return from_flax(self.spec, {"params": self._on(grads, self._local[0])}, trainable_only=True)

    def _evaluate(self, batch: Batch) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        args = (self._params, self._stats, batch.x, batch.y, batch.device_sizes)
        return self._compiled("evaluate", batch, *args)(*args)

    @scoped
    def evaluate(self, batch: Batch) -> StepStats:
        if not batch.labelled:
            raise MultidevError("evaluate needs labels: cut the batch with its labels")
        loss_sum, correct, count = jax.device_get(self._evaluate(batch)[1:])
        if not self._reports:
            return StepStats(0.0, 0, 0)
        return StepStats(float(loss_sum), int(correct), int(count))

    @scoped
    def predict(self, batch: Batch) -> np.ndarray:
        """This process's rows' logits, in sample order."""
        return predictions(self._held(self._evaluate(batch)[0], batch), self.spec.num_classes, self.dtype)

    # State -----------------------------------------------------------------
    def _variables(self) -> dict[str, Any]:
        return {"params": self._params, "batch_stats": self._stats}

    @scoped
    def replica_state(self, device: int) -> State:
        return from_flax(self.spec, self._on(self._variables(), self._local[device * self.parts]))

    @scoped
    def load_state(self, state: State) -> None:
        self.spec.check(state)
        variables = to_flax(self.spec, state, self.dtype)
        self._params = self._replicate(variables["params"])
        self._stats = self._replicate(variables["batch_stats"])

    # OptimizerState: optax's state <-> canonical names --------------------------------------------------
    @scoped
    def optimizer_state(self) -> State:
        return optimizers.read_state(self._on(self._opt_state, self._local[0]), self.setup.optimizer, self.spec)

    @scoped
    def load_optimizer_state(self, state: State) -> None:
        check_state(self.setup.optimizer, self.spec, state)
        self._opt_state = self._replicate(optimizers.write_state(self._steps.optimizer, self.setup.optimizer,
                                                                 self.spec, state, self._params, self.dtype))

    def _replicate(self, tree: Any) -> Any:
        """The same host arrays on every device of the job (each process places its own copies)."""
        if self.setup.group.size == 1:
            return jax.device_put(tree, self._replicated)
        return jax.tree.map(lambda a: jax.make_array_from_callback(np.shape(a), self._replicated,
                                                                   lambda index: np.asarray(a)[index]), tree)
