"""The engine object the entry point returns."""

from __future__ import annotations

from typing import Optional

import torch

from multidev.engine import LAYERS, MultiProcess, Setup, State

from . import cpu_layout, distributed, gpu
from .devices import gpu_count
from .parallel import TorchReplicas


class TorchBackend(MultiProcess):
    name = "torch"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64", "multi_process",
                              "sync_batchnorm_processes", "optimizers", "accumulate", "bf16",
                              "pending_stats", "shard_optimizer", "shard_gradients", "shard_parameters",
                              "shard_processes"})
    frameworks = ("torch",)
    #: every layer of the model language: the kit's layer checks hold the engine to it
    layers = frozenset(LAYERS)
    #: multi_process: torch's elastic launcher and torch.distributed (launch, join, leave, all_sum)
    distributed = distributed

    def settings(self) -> dict[str, str]:
        return {"threads": f"{torch.get_num_threads()} (torch's own setting; this engine leaves it alone)",
                "tf32": "off unless the run opts in (tf32): cuDNN's and CUDA matmul's TF32 flags are set to the "
                        "run's choice for each step on a GPU and restored after",
                "gpu forms": gpu.describe(),
                "cpu layout": cpu_layout.describe()}

    def gpu_count(self) -> int:
        return gpu_count()

    def max_cpu_devices(self) -> Optional[int]:
        return None  # CPU devices are replicas on the host: any number

    def replicate(self, setup: Setup, state: State) -> TorchReplicas:
        return TorchReplicas(setup, state)
