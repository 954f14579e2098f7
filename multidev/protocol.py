"""What an engine implements: the whole contract between the core and a backend.

An engine is a package that registers a factory under the entry-point group
``multidev.backends``. The factory returns a :class:`Backend`; its
``replicate`` returns :class:`Replicas`, the model held on every device.
Everything else (devices, the split rule, data, initial weights, the
training loop, checkpoints) belongs to the core, so engines stay small and
give the same answers. See docs/writing-a-backend.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from .devices import Device
from .errors import MultidevError
from .models import ModelSpec, State

#: Capabilities an engine may claim; the conformance kit skips what is not claimed.
CAPABILITIES = frozenset({
    "gpu",              # can place replicas on CUDA GPUs
    "virtual_cpu",      # k > 1 CPU devices in one process (contract: Devices)
    "sync_batchnorm",   # batchnorm="sync": whole-minibatch statistics
    "multi_process",    # one process per device
    "float64",          # dtype="float64": the float64 runs that float32 answers are judged against
})

DTYPES = ("float32", "float64")

BATCHNORM_MODES = ("local", "sync")


def check_dtype(dtype: str, capabilities: frozenset[str]) -> None:
    """float32 always; float64 only where the engine claims it."""
    if dtype not in DTYPES:
        raise MultidevError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if dtype == "float64" and "float64" not in capabilities:
        raise MultidevError("this engine computes in float32 only: leave dtype at float32")


def check_batchnorm(mode: str) -> None:
    """The one check of a BatchNorm mode, for the core and for engines called directly."""
    if mode not in BATCHNORM_MODES:
        raise MultidevError(f"unknown batchnorm {mode!r}: choose one of {', '.join(BATCHNORM_MODES)}")


@dataclass(frozen=True)
class StepStats:
    """Sums over one minibatch, added up over all devices."""

    loss_sum: float  # sum of per-sample cross-entropy
    correct: int     # samples whose arg-max logit is the label
    count: int       # samples seen: the minibatch size


@runtime_checkable
class Replicas(Protocol):
    """The model replicated on every device (Replicate), trained in data parallel.

    A ``Batch`` is whatever ``split_batch`` returns: the minibatch cut by the
    core's sizes and placed on the devices (Shard). ``train_step`` and
    ``gradients`` aggregate the shards' gradients with weights n_i / B
    (AllReduce), so the update equals one device's on the whole batch.
    """

    devices: tuple[Device, ...]
    #: one-time compilation seconds, reported apart from epoch times (0 where none)
    compile_seconds: float

    def split_batch(self, x: np.ndarray, y: Optional[np.ndarray], sizes: Sequence[int]) -> Any:
        """Cut rows ``[start_i, end_i)`` for device i (sizes from ``multidev.shard_sizes``) and place them."""

    def shards(self, batch: Any) -> list[np.ndarray]:
        """The images each device holds for ``batch``, back on the host (for checks)."""

    def train_step(self, batch: Any, lr: float) -> StepStats:
        """Forward and backward on every device, aggregate, apply SGD with ``lr``."""

    def gradients(self, batch: Any) -> State:
        """The aggregated gradient of the mean loss over the batch, canonical layout, no update."""

    def evaluate(self, batch: Any) -> StepStats:
        """Loss and correct count in inference mode, every device on its own shard."""

    def predict(self, batch: Any) -> np.ndarray:
        """Logits in inference mode, rows in sample order."""

    def state(self) -> State:
        """Parameters and running statistics in the canonical layout (from device 0)."""

    def replica_states(self) -> list[State]:
        """Every device's own copy of ``state()``, to check that replicas agree."""

    def load_state(self, state: State) -> None:
        """Copy canonical arrays onto every device."""


@runtime_checkable
class Backend(Protocol):
    """An engine: a framework's implementation of the replicated model."""

    name: str
    capabilities: frozenset[str]

    def version(self) -> str:
        """The engine's and its framework's versions, for reports."""

    def gpu_count(self) -> int:
        """Accelerators this engine can use on this machine."""

    def max_cpu_devices(self) -> Optional[int]:
        """Virtual CPU devices this process can still offer (None: no limit)."""

    def replicate(self, spec: ModelSpec, state: State, devices: Sequence[Device], *,
                  batchnorm: str = "local", dtype: str = "float32") -> Replicas:
        """Build the model on every device and load ``state`` into each replica.

        ``dtype="float64"`` is asked for only of engines that claim ``float64``.
        """
