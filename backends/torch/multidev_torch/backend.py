"""The engine object the entry point returns."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from multidev.engine import Launch, ProcessGroup, Setup, State

from . import distributed
from .parallel import TorchReplicas


class TorchBackend:
    name = "torch"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64", "multi_process",
                              "sync_batchnorm_processes", "optimizers", "accumulate", "bf16"})
    frameworks = ("torch",)

    def settings(self) -> dict[str, str]:
        return {"threads": f"{torch.get_num_threads()} (torch's own setting; this engine leaves it alone)",
                "tf32": "off unless the run opts in (tf32): cuDNN's and CUDA matmul's TF32 flags are set to the "
                        "run's choice for each step on a GPU and restored after"}

    def gpu_count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def max_cpu_devices(self) -> Optional[int]:
        return None  # CPU devices are replicas on the host: any number

    def replicate(self, setup: Setup, state: State) -> TorchReplicas:
        return TorchReplicas(setup, state)

    # multi_process: torch's elastic launcher and torch.distributed (see distributed.py) -------------------
    def launch(self, argv: Sequence[str], launch: Launch) -> None:
        distributed.launch(argv, launch.processes, launch.nnodes, launch.node_rank, launch.master, launch.timeout)

    def join(self, group: ProcessGroup, local_rank: int) -> None:
        self._gpu = self.gpu_count() > 0
        if self._gpu:
            torch.cuda.set_device(local_rank % self.gpu_count())
        distributed.join(group, self._gpu)

    def leave(self) -> None:
        distributed.leave()

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        return distributed.all_sum(values, torch.device("cuda") if getattr(self, "_gpu", False) else None)
