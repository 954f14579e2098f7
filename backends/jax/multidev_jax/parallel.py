"""The model replicated over a JAX device mesh: place, train, evaluate, state in and out.

:class:`JaxReplicas` is the engine's ``ReplicaStates``: it places the core's
shards on the mesh (:mod:`.placing`), runs the steps (:mod:`.steps`: a
gradient per device, the AllReduce, the update) compiled once per shape
(:mod:`.compiled`), and hands the state back in canonical names
(:mod:`.layout`, :mod:`.optimizers`). Its forms (:mod:`.forms`) are settled
when it is made and decided at the first batch, the state then moved onto the
mesh they ask for. A job whose processes share a machine sums its gradients
through shared memory (:mod:`.shared_sum`). The gradient sum of an
accumulated update is one gradient-sized replicated tree, made at the first
micro-batch. A sharded run (``setup.shard``, :mod:`.sharding`) keeps its
arrays cut into the devices' rows, runs one part per device and sums through
XLA's collectives alone; its state comes back gathered whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np

from multidev.engine import (MultidevError, ReplicaStates, Setup, Shards, State, StepStats, WaitedSteps, check_state,
                             predictions)

from . import forms, optimizers, sharding
from .compiled import Compiler
from .devices import job_devices
from .distributed import peers
from .forms.threads import best_seconds
from .layout import from_flax, to_flax
from .model import MISSING_MASKS
from .placing import Batch, Placement, padded
from .shared_sum import SharedSum
from .steps import steps

_UNOPENED = object()  # the shared-memory sum of a job, before its first step asks for it


@dataclass(frozen=True)
class Sums:
    """A train step's loss sum and right answers, still on the device (``pending_stats``): reading them waits."""

    arrays: Sequence[jax.Array]
    total: int
    reports: bool

    def result(self) -> StepStats:
        with peers():  # the step's collectives end here: a peer gone during them is one line
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


class JaxReplicas(WaitedSteps, ReplicaStates):
    def __init__(self, setup: Setup, state: State) -> None:
        self.setup, self.spec, self.dtype = setup, setup.spec, setup.np_dtype
        named = job_devices(setup.devices, setup.group)  # every process's, rank-major
        #: the run's forms: settled now, decided at the first batch where they are not (forms/decided.py)
        self.forms = forms.settle(self.spec, named, setup.group.size, measure=setup.dtype == "float32")
        #: a sharded run's level (contract: Sharding); it runs each device whole: the mesh is the job's devices
        self.sharded = setup.shard != "none"
        if self.sharded:
            self.forms = dataclasses.replace(self.forms, parts=1)
        self._compiler = Compiler(self.forms.threads)
        meanwhile = self.forms.meanwhile()
        self._use(Placement(setup, named, meanwhile.parts), meanwhile)
        self._sum: Any = None  # the gradient summed over an update's micro-batches so far (None: never accumulated)
        #: a job's gradient sum through shared memory (shared_sum.py), opened at its first step; None: in the step
        self._shared: Any = _UNOPENED if setup.group.size > 1 and not self.sharded else None
        if setup.group.size > 1:  # the step's psum spans the job: XLA's collectives, gloo between CPU processes
            self.process_sums = "XLA's collectives inside the compiled step"
        self.load_state(state)
        self.load_optimizer_state(setup.optimizer.init_state(self.spec, self.dtype))

    #: a sharded run's arrays are padded to equal parts (XLA's shardings): what held_bytes measures
    @property
    def padded_shards(self) -> bool:
        return self.sharded

    # The run's forms and mesh -------------------------------------------------
    @property
    def mesh(self) -> jax.sharding.Mesh:
        return self._placement.mesh

    @property
    def parts(self) -> int:
        """The JAX devices (places of the mesh) each named device runs on."""
        return self._placement.parts

    @property
    def inputs(self) -> str:
        """The convolutions' inputs' form the steps run (forms/conv_inputs.py)."""
        return self.forms.meanwhile().conv_inputs

    def _program(self) -> tuple:
        """The step's program besides shapes, devices and forms: what a measured form is kept for."""
        setup = self.setup
        return (self.spec, setup.sync, setup.optimizer, setup.precision, setup.tf32, self.dtype)

    def _use(self, placement: Placement, run: forms.Forms) -> None:
        """Run on ``placement``'s mesh in forms ``run``: its steps, and the state moved onto it."""
        moving = hasattr(self, "_params")  # placed on another mesh before: moved, device to device
        self._placement = placement
        #: what the compiled steps depend on besides shapes
        self._recipe = (self.spec, self.setup.sync, placement.mesh, self.setup.optimizer, self.setup.precision,
                        self.setup.tf32, run)
        self._steps = sharding.sharded_steps(*self._recipe, self.setup.shard) if self.sharded else steps(*self._recipe)
        if moving and not self.sharded:  # a sharded run's mesh is always its devices, one part each: nothing moves
            self._params, self._opt_state, self._stats, self._sum = placement.moved(
                (self._params, self._opt_state, self._stats, self._sum))

    def _decide(self, shards: Shards) -> None:
        """The forms still open, each by a train step timed in it on these shards; the time counts as compiling."""
        start, compiling, named = time.perf_counter(), self._compiler.seconds, self._placement.named
        probe = self._placement.probe(shards)
        rate, whole = self.dtype.type(0.0), self.dtype.type(probe.batch)

        def seconds(trial: forms.Forms) -> float:
            self._use(Placement(self.setup, named, trial.parts), trial)
            batch = self._placement.place(probe)
            args = (self._params, self._opt_state, self._stats, batch.x, batch.drops, batch.y, batch.device_sizes,
                    rate, whole)
            return best_seconds(self._compiled("train", batch, *args), args, repeats=3)

        self.forms = forms.decide(self.forms, list(named), padded(shards.sizes), self._program(), seconds,
                                  forms.network_traits(self.spec))
        self._use(Placement(self.setup, named, self.forms.parts), self.forms)
        self._compiler.seconds = compiling + time.perf_counter() - start

    @property
    def compile_seconds(self) -> float:
        return self._compiler.seconds

    @property
    def compile_cached(self) -> int:
        """Executables loaded from JAX's persistent compilation cache instead of compiled."""
        return self._compiler.cached

    def _compiled(self, name: str, batch: Batch, *args: Any) -> jax.stages.Compiled:
        return self._program_for(name, getattr(self._steps, name), batch.length, *args)

    def _program_for(self, name: str, jitted: Callable[..., Any], length: Optional[int],
                     *args: Any) -> jax.stages.Compiled:
        """``jitted`` compiled for these arguments, once per recipe and shard length in the process."""
        level = (self.setup.shard,) if self.sharded else ()
        return self._compiler.get((name, *self._recipe, length, self.dtype, *level), jitted, *args)

    # Split -------------------------------------------------------------------
    @scoped
    def place(self, shards: Shards) -> Batch:
        k = len(self._placement.local) // self.parts
        if len(shards.sizes) != k or len(shards.group_sizes or shards.sizes) != len(self._placement.named):
            raise MultidevError(f"{len(shards.sizes)} shards for {k} devices: cut the batch with multidev.shard_sizes")
        if not self.forms.decided:
            self._decide(shards)
        return self._placement.place(shards)

    @scoped
    def shards(self, batch: Batch) -> list[np.ndarray]:
        return self._placement.held(batch.x, batch)

    # Steps -------------------------------------------------------------------
    @staticmethod
    def _dropped(batch: Batch) -> dict[str, jax.Array]:
        """The batch's Dropout multipliers for a training pass: a model with Dropout cannot train without them."""
        if batch.drops is None:
            raise MultidevError(MISSING_MASKS)
        return batch.drops

    @scoped
    def queue_step(self, batch: Batch, lr: float) -> Sums:
        rate, whole = self.dtype.type(lr), self.dtype.type(batch.whole)  # inputs of the step: no recompile
        drops = self._dropped(batch)
        if self._sum is None:
            return self._sums(self._update(batch, drops, rate, whole), batch)
        return self._sums(self._accumulate(batch, drops, rate, whole, update=True), batch)

    @scoped
    def queue_accumulate(self, batch: Batch) -> Sums:
        zero, whole = self.dtype.type(0.0), self.dtype.type(batch.whole)  # the rate is unused: nothing is updated
        return self._sums(self._accumulate(batch, self._dropped(batch), zero, whole, update=False), batch)

    def _sums(self, sums: Sequence[jax.Array], batch: Batch) -> Sums:
        """The step's sums, their copy to the host queued behind it: reading them then waits for the step only,
        not for a transfer begun once it is read (that read took 0.5 ms a step on an H200, a ViT step 2 ms)."""
        for a in sums:
            a.copy_to_host_async()
        return Sums(tuple(sums), batch.total, self.setup.group.rank == 0)  # psum'd: rank 0 reports the job's

    def _update(self, batch: Batch, drops: dict[str, jax.Array], rate: Any, whole: Any) -> list[jax.Array]:
        """A step of split, per-device gradients, AllReduce and update; a job sharing a machine sums through its
        shared memory instead."""
        if self._shared is _UNOPENED:  # a collective: every process's first step opens it
            self._shared = SharedSum.open(self._params, self.dtype, self.setup.group, self._steps, self._placement)
            if self._shared is not None:
                self.process_sums = "shared memory"
        if self._shared is not None:
            self._params, self._opt_state, self._stats, sums = self._shared.train(
                self._program_for, self._params, self._opt_state, self._stats, batch, drops, rate, whole)
            return sums
        args = (self._params, self._opt_state, self._stats, batch.x, drops, batch.y, batch.device_sizes, rate, whole)
        self._params, self._opt_state, self._stats, *sums = self._compiled("train", batch, *args)(*args)
        return sums

    def _accumulate(self, batch: Batch, drops: dict[str, jax.Array], rate: Any, whole: Any,
                    update: bool) -> list[jax.Array]:
        """A micro-batch's gradient added to the update's sum; with ``update``, that sum applied."""
        if self._sum is None:  # the first micro-batch: zeros, reused by every later update of the run
            self._sum = self._zeros()
        args = (self._params, self._opt_state, self._stats, self._sum, batch.x, drops, batch.y, batch.device_sizes,
                rate, whole, np.bool_(update))
        self._params, self._opt_state, self._stats, self._sum, *sums = \
            self._compiled("accumulate", batch, *args)(*args)
        return sums

    def _zeros(self) -> Any:
        """An accumulated gradient's start, in the form the update takes (cut where the level shards gradients)."""
        if self.sharded:
            return sharding.place(sharding.zeros(self._steps.shapes, self.dtype), self._steps.grads, self.mesh)
        return self._placement.replicate(jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), self._params))

    @scoped
    def gradients(self, batch: Batch) -> State:
        args = (self._params, self._stats, batch.x, self._dropped(batch), batch.y, batch.device_sizes,
                self.dtype.type(batch.whole))
        grads = self._compiled("gradients", batch, *args)(*args)
        return from_flax(self.spec, {"params": Placement.on(grads, self._placement.local[0])}, trainable_only=True)

    def _evaluate(self, batch: Batch) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        args = (self._params, self._stats, batch.x, batch.y, batch.device_sizes)
        return self._compiled("evaluate", batch, *args)(*args)

    @scoped
    def evaluate(self, batch: Batch) -> StepStats:
        if not batch.labelled:
            raise MultidevError("evaluate needs labels: cut the batch with its labels")
        loss_sum, correct, count = jax.device_get(self._evaluate(batch)[1:])
        if self.setup.group.rank != 0:  # the sums are the job's: rank 0 reports them, the others report 0
            return StepStats(0.0, 0, 0)
        return StepStats(float(loss_sum), int(correct), int(count))

    @scoped
    def predict(self, batch: Batch) -> np.ndarray:
        """This process's rows' logits, in sample order."""
        logits = self._placement.held(self._evaluate(batch)[0], batch)
        return predictions(logits, self.spec.num_classes, self.dtype)

    # State -------------------------------------------------------------------
    @scoped
    def replica_state(self, device: int) -> State:
        params = self._steps.whole_params(self._params) if self.sharded else self._params  # a collective
        variables = {"params": params, "batch_stats": self._stats}
        return from_flax(self.spec, Placement.on(variables, self._placement.local[device * self.parts]))

    @scoped
    def load_state(self, state: State) -> None:
        self.spec.check(state)
        variables = to_flax(self.spec, state, self.dtype)
        if self.sharded:
            self._params = sharding.place(variables["params"], self._steps.params, self.mesh)
        else:
            self._params = self._placement.replicate(variables["params"])
        self._stats = self._placement.replicate(variables["batch_stats"])

    # OptimizerState: optax's state <-> canonical names --------------------------------------------------
    @scoped
    def optimizer_state(self) -> State:
        whole = self._steps.whole_opt(self._opt_state) if self.sharded else self._opt_state  # a collective
        own = Placement.on(whole, self._placement.local[0])
        return optimizers.read_state(own, self.setup.optimizer, self.spec)

    @scoped
    def load_optimizer_state(self, state: State) -> None:
        check_state(self.setup.optimizer, self.spec, state)
        if not self.sharded:
            self._opt_state = self._placement.replicate(optimizers.write_state(
                self._steps.optimizer, self.setup.optimizer, self.spec, state, self._params, self.dtype))
            return
        shapes = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, self.dtype), self._steps.shapes)
        host = optimizers.write_state(self._steps.optimizer, self.setup.optimizer, self.spec, state, shapes, self.dtype)
        self._opt_state = sharding.place(host, self._steps.opt, self.mesh)

    @scoped
    def held_bytes(self) -> list[dict[str, int]]:
        """Bytes of trainable parameters and optimizer slots each of this process's devices holds between updates,
        read from the arrays' shards on it."""
        devices = self._placement.local[::self.parts]
        return sharding.held_bytes(self._params, self._opt_state, self.setup.optimizer, devices)
