"""What an engine implements: the protocols between the core and a backend, and the types it is handed.

An engine is a package that registers a factory under the entry-point group
``multidev.backends``. The factory returns a :class:`Backend`; its
``replicate`` returns :class:`Replicas`, the model held on every device.
Everything else (devices, the split rule, data, initial weights, the
training loop, checkpoints, checks of the user's settings) belongs to the
core, so engines stay small and give the same answers. See
docs/writing-a-backend.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Protocol, Sequence, TypeVar, runtime_checkable

import numpy as np

from multidev.engines.capabilities import check_claims, needed
from multidev.engines.legacy import adapted
from multidev.engines.vocabulary import check_layers
from multidev.errors import MultidevError
from multidev.processes.group import ProcessGroup
from multidev.rules.batchnorm import check_batchnorm
from multidev.rules.devices import Device
from multidev.rules.models import ModelSpec, State
from multidev.rules.optimizers import Optimizer
from multidev.rules.precision import check_accumulate, check_dtype, check_precision
from multidev.rules.sharding import check_level, owned_rows
from multidev.rules.split import Shards, shard_sizes

if TYPE_CHECKING:
    from multidev.processes.faults import Restart
    from multidev.processes.launch import Launch


@dataclass(frozen=True)
class Setup:
    """What ``replicate`` is asked to build: the model, this process's devices and how to compute.

    Made and checked by the core, so an engine never validates the user's settings.
    """

    spec: ModelSpec
    devices: tuple[Device, ...]
    batchnorm: str = "local"
    dtype: str = "float32"
    group: ProcessGroup = field(default_factory=ProcessGroup)
    #: the update rule; its learning rate comes with every step
    optimizer: Optimizer = field(default_factory=Optimizer)
    #: micro-batches per update: Accumulates.accumulate comes accumulate - 1 times before each train_step
    accumulate: int = 1
    precision: str = "fp32"
    #: on GPUs only, the user's explicit opt-in to TF32 matrix multiplies (off: full float32, as on CPU)
    tf32: bool = False
    #: the rows of a full micro-batch over the job (the run's batch size), or None where batches have any size:
    #: an engine that compiles a program per shape may pad a shorter batch (an epoch's last, or evaluation's)
    #: to a full one's shard length, so that one program runs every step
    rows: Optional[int] = None
    #: what each device keeps only its rows of (contract: Sharding): "none", "optimizer", "gradients", "parameters"
    shard: str = "none"

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(Device.parse(d) for d in self.devices))
        if not self.devices:
            raise MultidevError("need at least one device")
        check_batchnorm(self.batchnorm)
        check_dtype(self.dtype)
        check_precision(self.precision, self.dtype)
        object.__setattr__(self, "accumulate", check_accumulate(self.accumulate))
        check_level(self.shard)
        if self.rows is not None and (not isinstance(self.rows, int) or self.rows < 1):
            raise MultidevError(f"rows must be a positive whole number or None, got {self.rows!r}")

    @property
    def sync(self) -> bool:
        return self.batchnorm == "sync"

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def job_devices(self) -> int:
        """Devices of the whole job: what a sharded run splits each array's rows over."""
        return len(self.devices) * self.group.size

    def full_shard(self) -> Optional[int]:
        """The rows of a full micro-batch's largest shard under the split rule (at least 1), which an engine that
        compiles per shape may key on or pad to; None where batches have any size (no ``rows``)."""
        if self.rows is None:
            return None
        return max(1, max(shard_sizes(self.rows, self.job_devices)))

    def owned(self, rows: int) -> list[tuple[int, int]]:
        """``[start, end)`` of an array's rows that each of this process's devices owns under the sharding rule
        (job-wide device ``rank * len(devices) + i``, rank-major as the batch split)."""
        k = len(self.devices)
        return owned_rows(rows, self.job_devices)[self.group.rank * k:(self.group.rank + 1) * k]

    def needs(self) -> frozenset[str]:
        """The capabilities an engine must claim to run this setup."""
        return needed(dtype=self.dtype, batchnorm=self.batchnorm, processes=self.group.size,
                      cpu_devices=sum(d.kind == "cpu" for d in self.devices),
                      gpus=sum(d.kind == "gpu" for d in self.devices), optimizer=self.optimizer,
                      accumulate=self.accumulate, precision=self.precision, shard=self.shard)


@dataclass(frozen=True)
class StepStats:
    """Sums over one minibatch, added up over all devices."""

    loss_sum: float  # sum of per-sample cross-entropy
    correct: int     # samples whose arg-max logit is the label
    count: int       # samples seen: the minibatch size


@runtime_checkable
class PlansCpuDevices(Protocol):
    """An engine whose framework fixes its count of virtual CPU devices when it starts (JAX does).

    A run tells it the most CPU devices it will name before any other call
    (``gpu_count`` starts the framework), so that the engine makes no more
    than it needs: XLA:CPU sizes its thread pools by the device count, and on
    2 cores 8 idle devices slowed a 1-device ResNet-18 step by 15%.
    """

    def plan_cpu_devices(self, count: int) -> None:
        """This process's run will name at most ``count`` CPU devices (a no-op once the framework started)."""


@runtime_checkable
class PendingStats(Protocol):
    """A step's sums still on the devices (engines that claim ``pending_stats``): reading them waits for the step."""

    def result(self) -> StepStats:
        """The sums on the host."""


BatchT = TypeVar("BatchT")


@runtime_checkable
class Replicas(Protocol[BatchT]):
    """The model replicated on every device (Replicate), trained in data parallel.

    A batch (``BatchT``, the engine's own type) is what ``place`` returns: the
    core's shards moved onto their devices (Shard). ``train_step`` and
    ``gradients`` aggregate the shards' gradients with weights n_i / B
    (AllReduce), so the update equals one device's on the whole batch.
    """

    setup: Setup
    #: one-time compilation seconds, reported apart from epoch times (0 where none)
    compile_seconds: float

    def place(self, shards: Shards) -> BatchT:
        """Put ``shards.x[i]`` (and ``shards.y[i]``) on device i; an empty shard stays empty."""

    def shards(self, batch: BatchT) -> list[np.ndarray]:
        """The images each device holds for ``batch``, back on the host (for checks)."""

    def train_step(self, batch: BatchT, lr: float) -> StepStats:
        """Forward and backward on every device, aggregate, and update with ``setup.optimizer`` at rate ``lr``.

        Each shard's loss sum is divided by ``batch``'s ``Shards.batch``: the
        rows of the whole update. Where micro-batches were accumulated since
        the last update (:class:`Accumulates`), their gradients are added to
        this batch's before the one update, and the sum starts again.
        """

    def gradients(self, batch: BatchT) -> State:
        """The aggregated gradient of the mean loss over the batch, canonical layout, no update."""

    def evaluate(self, batch: BatchT) -> StepStats:
        """Loss and correct count in inference mode, every device on its own shard."""

    def predict(self, batch: BatchT) -> np.ndarray:
        """Logits in inference mode, rows in sample order."""

    def state(self) -> State:
        """Parameters and running statistics in the canonical layout (from device 0)."""

    def replica_states(self) -> list[State]:
        """Every device's own copy of ``state()``, to check that replicas agree."""

    def load_state(self, state: State) -> None:
        """Copy canonical arrays onto every device."""


@runtime_checkable
class Accumulates(Protocol[BatchT]):
    """What replicas of an engine that claims ``accumulate`` add: a micro-batch's gradient kept, no update.

    ``accumulate`` comes ``setup.accumulate - 1`` times before each
    ``train_step``, which adds its own gradient and updates once with the
    total (contract: Gradient accumulation).
    """

    def accumulate(self, batch: BatchT) -> StepStats:
        """Add the aggregated gradient of ``batch`` to what the replicas hold; the sums of its rows."""


@runtime_checkable
class QueuesSteps(Protocol[BatchT]):
    """What replicas of an engine that claims ``pending_stats`` add: steps whose sums are read later.

    The same steps as ``train_step`` and ``accumulate``, returning before
    their sums reach the host, so that the next step is queued while this
    one runs (contract: Input pipeline).
    """

    def queue_step(self, batch: BatchT, lr: float) -> PendingStats:
        """``train_step``, its sums still on the devices."""

    def queue_accumulate(self, batch: BatchT) -> PendingStats:
        """``accumulate``, its sums still on the devices."""


@runtime_checkable
class OptimizerState(Protocol):
    """What replicas of an engine that claims ``optimizers`` add: the optimizer's state, canonical names.

    Names are ``Optimizer.state_names(spec)``: ``optimizer.step`` (updates
    done) and ``optimizer.<slot>.<parameter>`` in the parameter's canonical
    layout, so any engine resumes another's checkpoint (contract: Optimizers).
    """

    def optimizer_state(self) -> State:
        """The optimizer's state, as device 0 holds it, in the parameters' dtype (the count as int64)."""

    def load_optimizer_state(self, state: State) -> None:
        """Put canonical optimizer state on every device (the next update continues from it)."""


@runtime_checkable
class Backend(Protocol):
    """An engine: a framework's implementation of the replicated model."""

    name: str
    capabilities: frozenset[str]
    #: the distributions whose versions reports name, e.g. ("jax", "flax", "optax"); the core looks them up
    frameworks: tuple[str, ...]

    def settings(self) -> dict[str, str]:
        """The process-wide settings the engine runs under, each with what it is and when it applies."""

    def gpu_count(self) -> int:
        """Accelerators this engine can use on this machine."""

    def max_cpu_devices(self) -> Optional[int]:
        """Virtual CPU devices this process can offer (None: no limit)."""

    def replicate(self, setup: Setup, state: State) -> Replicas:
        """Build ``setup.spec`` on every device of ``setup`` and load ``state`` into each replica.

        Only setups whose ``needs()`` the engine claims reach it. An engine
        may still decline a combination it cannot run with a MultidevError.
        """


@runtime_checkable
class MultiProcessBackend(Backend, Protocol):
    """What an engine that claims ``multi_process`` adds: its framework's own launcher, runtime and sums."""

    def launch(self, argv: Sequence[str], launch: "Launch") -> "Sequence[Restart]":
        """Run ``python -m multidev <argv>`` as ``launch.processes`` workers here, through the framework's launcher.

        Returns when every worker has finished, with the restarts it made.
        When one fails, the others are stopped and, up to
        ``launch.max_restarts`` times, all start again with
        ``TORCHELASTIC_RESTART_COUNT`` set (``multidev.engine.restart`` says
        so in one line and makes the record); then a ``MultidevError`` names
        its rank and how it ended. SIGINT or SIGTERM is passed on to the
        workers and ``JobStopped`` raised once they have stopped.
        """

    def join(self, group: ProcessGroup, local_rank: int) -> None:
        """Connect this worker to the framework's runtime (the launcher's environment says where)."""

    def leave(self) -> None:
        """Disconnect at the end of the run."""

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        """``values`` summed over every process of the group (float64 in, float64 out)."""


def plan_cpu_devices(engine: Backend, count: int) -> None:
    """Tell an engine that fixes its CPU device count at start-up (:class:`PlansCpuDevices`) a run's most."""
    if isinstance(engine, PlansCpuDevices):
        engine.plan_cpu_devices(count)


def replicate(engine: Backend, setup: Setup, state: State) -> Replicas:
    """The core's way to build replicas: the setup checked against what the engine claims.

    Replicas written to the protocol before ``train_step`` was split in two
    (``update=`` and ``pending=`` flags) are adapted, with a warning, for one release.
    """
    check_claims(engine, setup.needs())
    check_layers(engine, setup.spec.graph)
    return adapted(engine.replicate(setup, state))
