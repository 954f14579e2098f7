"""The engine object the entry point returns."""

from __future__ import annotations

from typing import Optional, Sequence

import jax

from multidev.engine import Device, ModelSpec, State, check_batchnorm, check_dtype

from .devices import configure_cpu_devices, cpu_devices, gpu_devices
from .parallel import JaxReplicas


class JaxBackend:
    name = "jax"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64"})

    def __init__(self) -> None:
        configure_cpu_devices()  # must happen before the first JAX operation (see devices.py)

    def version(self) -> str:
        from importlib.metadata import version
        return (f"multidev-jax {version('multidev-jax')}, jax {jax.__version__}, flax {version('flax')}, "
                f"optax {version('optax')}")

    def gpu_count(self) -> int:
        return len(gpu_devices())

    def max_cpu_devices(self) -> Optional[int]:
        return len(cpu_devices())  # fixed when JAX started

    def replicate(self, spec: ModelSpec, state: State, devices: Sequence[Device], *,
                  batchnorm: str = "local", dtype: str = "float32") -> JaxReplicas:
        check_batchnorm(batchnorm)
        check_dtype(dtype, self.capabilities)
        return JaxReplicas(spec, state, devices, batchnorm, dtype)
