"""The engine object the entry point returns: what it can do, and the factory for replicas."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Optional, Sequence

import numpy as np

from multidev.engine import Device, ModelSpec, MultidevError, State, check_batchnorm, check_dtype

from .parallel import NumpyReplicas


class NumpyBackend:
    name = "numpy"
    # Claim only what the engine really does: the conformance kit skips the
    # checks of capabilities that are not claimed, and runs all the others.
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm", "float64"})

    def version(self) -> str:
        try:
            own = version("multidev-numpy")
        except PackageNotFoundError:  # imported from a source tree, not installed
            own = "unknown"
        return f"multidev-numpy {own}, numpy {np.__version__}"

    def gpu_count(self) -> int:
        return 0  # NumPy runs on the host only; gpus=k falls back to k CPU devices in the core

    def max_cpu_devices(self) -> Optional[int]:
        return None  # CPU devices are replicas on the host: any number

    def replicate(self, spec: ModelSpec, state: State, devices: Sequence[Device], *,
                  batchnorm: str = "local", dtype: str = "float32") -> NumpyReplicas:
        check_batchnorm(batchnorm)
        check_dtype(dtype, self.capabilities)
        if any(d.kind != "cpu" for d in devices):
            # The core only hands out GPUs when gpu_count() says so; this guards direct callers.
            raise MultidevError("the numpy engine runs on CPU devices only: use devices=k or cpu:i names")
        return NumpyReplicas(spec, state, devices, batchnorm, np.dtype(dtype))
