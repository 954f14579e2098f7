"""The engine object the entry point returns."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from multidev.engine import Device, ModelSpec, State, check_batchnorm, check_dtype

from .parallel import TorchReplicas


class TorchBackend:
    name = "torch"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64"})

    def version(self) -> str:
        from importlib.metadata import version
        return f"multidev-torch {version('multidev-torch')}, torch {torch.__version__}"

    def gpu_count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def max_cpu_devices(self) -> Optional[int]:
        return None  # CPU devices are replicas on the host: any number

    def replicate(self, spec: ModelSpec, state: State, devices: Sequence[Device], *,
                  batchnorm: str = "local", dtype: str = "float32") -> TorchReplicas:
        check_batchnorm(batchnorm)
        check_dtype(dtype, self.capabilities)
        return TorchReplicas(spec, state, devices, batchnorm, getattr(torch, dtype))
