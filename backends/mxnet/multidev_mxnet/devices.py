"""multidev device names to MXNet contexts, how many GPUs MXNet sees, and which kvstore sums over contexts.

Every function loads MXNet on its first call (see :mod:`.runtime`), so the
backend can import this module without loading it.
"""

from __future__ import annotations

from typing import Sequence

from multidev.engine import Device

from .runtime import mxnet


def mx_context(device: Device):
    mx = mxnet()
    return mx.gpu(device.index) if device.kind == "gpu" else mx.cpu(device.index)


def gpu_count() -> int:
    """GPUs MXNet can use now (0 for a build without CUDA, or without a driver)."""
    mx = mxnet()
    try:
        return int(mx.context.num_gpus())
    except mx.base.MXNetError:
        return 0


def kvstore_type(contexts: Sequence) -> str:
    """``device`` reduces on the GPUs themselves; on CPU contexts ``local`` (multi-threaded CPU sums) is faster."""
    return "device" if any(c.device_type == "gpu" for c in contexts) else "local"
