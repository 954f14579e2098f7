"""The engine object the entry point returns."""

from __future__ import annotations

from typing import Optional, Sequence

from multidev.engine import Device, ModelSpec, State, check_batchnorm, check_dtype

from .runtime import mxnet, threads_note


class MXNetBackend:
    name = "mxnet"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64"})

    def version(self) -> str:
        from importlib.metadata import version
        mx = mxnet()
        return f"multidev-mxnet {version('multidev-mxnet')}, mxnet {mx.__version__}, {threads_note()}"

    def gpu_count(self) -> int:
        mx = mxnet()
        try:
            return int(mx.context.num_gpus())
        except mx.base.MXNetError:  # a build without CUDA, or no driver
            return 0

    def max_cpu_devices(self) -> Optional[int]:
        return None  # MXNet's cpu(i) contexts: any number in one process

    def replicate(self, spec: ModelSpec, state: State, devices: Sequence[Device], *,
                  batchnorm: str = "local", dtype: str = "float32") -> "MXNetReplicas":
        check_batchnorm(batchnorm)
        check_dtype(dtype, self.capabilities)
        from .parallel import MXNetReplicas  # loads MXNet on first use (see runtime.py)
        return MXNetReplicas(spec, state, devices, batchnorm, dtype)
