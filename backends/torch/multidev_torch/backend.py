"""The engine object the entry point returns."""

from __future__ import annotations

from typing import Optional

import torch

from multidev.engine import Setup, State

from .parallel import TorchReplicas


class TorchBackend:
    name = "torch"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64"})
    frameworks = ("torch",)

    def settings(self) -> dict[str, str]:
        return {"threads": f"{torch.get_num_threads()} (torch's own setting; this engine leaves it alone)",
                "tf32": "off: cuDNN's TF32 flag is switched off for each step on a GPU and restored after"}

    def gpu_count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def max_cpu_devices(self) -> Optional[int]:
        return None  # CPU devices are replicas on the host: any number

    def replicate(self, setup: Setup, state: State) -> TorchReplicas:
        return TorchReplicas(setup, state)
