"""The engine object the entry point returns: what it can do, and the factory for replicas."""

from __future__ import annotations

from typing import Optional

from multidev.engine import LAYERS, Setup, State

from .parallel import NumpyReplicas


class NumpyBackend:
    name = "numpy"
    # Claim only what the engine really does: the core refuses the rest before it reaches
    # the engine, and the conformance kit skips the checks of what is not claimed.
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm", "float64", "accumulate"})
    frameworks = ("numpy",)  # reports name their versions
    #: every layer of the model language: the kit's layer checks hold the engine to it
    layers = frozenset(LAYERS)

    def settings(self) -> dict[str, str]:
        return {}  # nothing process-wide

    def gpu_count(self) -> int:
        return 0  # NumPy runs on the host only; gpus=k falls back to k CPU devices in the core

    def max_cpu_devices(self) -> Optional[int]:
        return None  # CPU devices are replicas on the host: any number

    def replicate(self, setup: Setup, state: State) -> NumpyReplicas:
        return NumpyReplicas(setup, state)
