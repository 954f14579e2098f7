"""multidev device names to torch devices, and how many GPUs torch can use.

torch has no CPU device index: every ``cpu:i`` is a replica on the host
(``torch.device("cpu")``), and ``gpu:i`` is CUDA device i.
"""

from __future__ import annotations

import torch

from multidev.engine import Device


def torch_device(device: Device) -> torch.device:
    return torch.device("cuda", device.index) if device.kind == "gpu" else torch.device("cpu")


def gpu_count() -> int:
    """CUDA devices usable now (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
