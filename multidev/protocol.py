"""What an engine implements: the whole contract between the core and a backend.

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

from .devices import Device
from .errors import MultidevError
from .models import ModelSpec, State
from .optim import Optimizer
from .shard import Shards

if TYPE_CHECKING:
    from .group import Launch

#: Capabilities an engine may claim; the conformance kit skips what is not claimed.
CAPABILITIES = frozenset({
    "gpu",              # can place replicas on CUDA GPUs
    "virtual_cpu",      # k > 1 CPU devices in one process (contract: Devices)
    "sync_batchnorm",   # batchnorm="sync": whole-minibatch statistics
    "multi_process",    # a process group of more than one process (contract: Process groups)
    "sync_batchnorm_processes",  # batchnorm="sync" whose statistics span the processes of a group
    "float64",          # dtype="float64": the float64 runs that float32 answers are judged against
    "optimizers",       # every Optimizer (momentum, Nesterov, weight decay, adamw) and its state (OptimizerState)
    "accumulate",       # train_step(..., update=False): gradients of micro-batches added up before one update
    "bf16",             # precision="bf16": compute in bfloat16, parameters and optimizer state in float32
})

DTYPES = ("float32", "float64")

#: fp32: compute in the parameters' dtype; bf16: compute in bfloat16 (contract: Mixed precision)
PRECISIONS = ("fp32", "bf16")

BATCHNORM_MODES = ("local", "sync")


def check_batchnorm(mode: str) -> None:
    """The one check of a BatchNorm mode."""
    if mode not in BATCHNORM_MODES:
        raise MultidevError(f"unknown batchnorm {mode!r}: choose one of {', '.join(BATCHNORM_MODES)}")


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise MultidevError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")


def check_precision(precision: str, dtype: str = "float32") -> None:
    if precision not in PRECISIONS:
        raise MultidevError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if precision == "bf16" and dtype != "float32":
        raise MultidevError(f"precision bf16 keeps float32 master weights: leave dtype at float32, not {dtype}")


def check_accumulate(accumulate: object) -> int:
    if isinstance(accumulate, bool) or not isinstance(accumulate, (int, np.integer)) or accumulate < 1:
        raise MultidevError(f"accumulate must be a whole number of micro-batches of at least 1, got {accumulate!r}")
    return int(accumulate)


@dataclass(frozen=True)
class ProcessGroup:
    """The processes of one job (contract: Process groups); a single process is a group of one.

    Devices are numbered rank-major over the group: process r's devices come
    after those of every lower rank, so the split rule over the global batch
    gives process r a contiguous run of rows, cut again over its own devices.
    """

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise MultidevError(f"process rank {self.rank} of {self.size}: need 0 <= rank < size and size >= 1")


def needed(*, dtype: str, batchnorm: str, processes: int, cpu_devices: int = 1, gpus: int = 0,
           optimizer: Optimizer = Optimizer(), accumulate: int = 1, precision: str = "fp32") -> frozenset[str]:
    """The capabilities a run of these settings asks of an engine (one rule for replicas and launchers)."""
    wanted = set()
    if not optimizer.plain:
        wanted.add("optimizers")
    if accumulate > 1:
        wanted.add("accumulate")
    if precision == "bf16":
        wanted.add("bf16")
    if dtype == "float64":
        wanted.add("float64")
    if batchnorm == "sync":
        wanted.add("sync_batchnorm")
    if cpu_devices > 1:
        wanted.add("virtual_cpu")
    if gpus:
        wanted.add("gpu")
    if processes > 1:
        wanted.add("multi_process")
        if batchnorm == "sync":
            wanted.add("sync_batchnorm_processes")
    return frozenset(wanted)


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
    #: micro-batches per update: train_step(..., update=False) comes accumulate - 1 times before each update
    accumulate: int = 1
    precision: str = "fp32"
    #: on GPUs only, the user's explicit opt-in to TF32 matrix multiplies (off: full float32, as on CPU)
    tf32: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(Device.parse(d) for d in self.devices))
        if not self.devices:
            raise MultidevError("need at least one device")
        check_batchnorm(self.batchnorm)
        check_dtype(self.dtype)
        check_precision(self.precision, self.dtype)
        object.__setattr__(self, "accumulate", check_accumulate(self.accumulate))

    @property
    def sync(self) -> bool:
        return self.batchnorm == "sync"

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def needs(self) -> frozenset[str]:
        """The capabilities an engine must claim to run this setup."""
        return needed(dtype=self.dtype, batchnorm=self.batchnorm, processes=self.group.size,
                      cpu_devices=sum(d.kind == "cpu" for d in self.devices),
                      gpus=sum(d.kind == "gpu" for d in self.devices), optimizer=self.optimizer,
                      accumulate=self.accumulate, precision=self.precision)


@dataclass(frozen=True)
class StepStats:
    """Sums over one minibatch, added up over all devices."""

    loss_sum: float  # sum of per-sample cross-entropy
    correct: int     # samples whose arg-max logit is the label
    count: int       # samples seen: the minibatch size


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

    def train_step(self, batch: BatchT, lr: float, *, update: bool = True) -> StepStats:
        """Forward and backward on every device, aggregate, and update with ``setup.optimizer`` at rate ``lr``.

        Each shard's loss sum is divided by ``batch``'s ``Shards.batch``: the
        rows of the whole update. With ``update=False`` (engines that claim
        ``accumulate``) the aggregated gradient is added to what the replicas
        hold and nothing is updated; the next ``update=True`` step adds its own
        gradient, updates once with the total, and starts a new sum.
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

    def launch(self, argv: Sequence[str], launch: "Launch") -> None:
        """Run ``python -m multidev <argv>`` as ``launch.processes`` workers here, through the framework's launcher.

        Returns when every worker has finished. When one fails, the others are
        stopped and a ``MultidevError`` names its rank and how it ended.
        """

    def join(self, group: ProcessGroup, local_rank: int) -> None:
        """Connect this worker to the framework's runtime (the launcher's environment says where)."""

    def leave(self) -> None:
        """Disconnect at the end of the run."""

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        """``values`` summed over every process of the group (float64 in, float64 out)."""


def check_claims(engine: Backend, needs: frozenset[str]) -> None:
    """One line when the engine does not claim every capability a run needs."""
    missing = sorted(needs - engine.capabilities)
    if missing:
        raise MultidevError(f"the {engine.name} engine does not offer {', '.join(missing)}: {_instead[missing[0]]}")


def replicate(engine: Backend, setup: Setup, state: State) -> Replicas:
    """The core's way to build replicas: the setup checked against what the engine claims."""
    check_claims(engine, setup.needs())
    return engine.replicate(setup, state)


_instead = {
    "float64": "leave dtype at float32",
    "sync_batchnorm": "use batchnorm='local'",
    "virtual_cpu": "use one CPU device",
    "gpu": "use CPU devices",
    "multi_process": "run one process",
    "sync_batchnorm_processes": "use batchnorm='local' with processes, or one process with several devices",
    "optimizers": "use plain SGD (no momentum, no weight decay)",
    "accumulate": "use --accumulate 1 and a smaller batch",
    "bf16": "use --precision fp32",
}
