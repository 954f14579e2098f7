"""The engine object the entry point returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from multidev.engine import Launch, ProcessGroup, Setup, State

from . import distributed
from .runtime import THREADS_ENV, mxnet, threads_note

if TYPE_CHECKING:
    from .parallel import MXNetReplicas


class MXNetBackend:
    """Creating it loads nothing: MXNet loads on the first call that needs it (see runtime.py)."""

    name = "mxnet"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64", "multi_process", "optimizers",
                              "accumulate", "bf16"})
    frameworks = ("mxnet",)

    def settings(self) -> dict[str, str]:
        mxnet()  # the thread count is fixed when MXNet loads: say what it became
        return {"threads": f"{threads_note()} (read once, when MXNet loads: set {THREADS_ENV} before it "
                           f"loads, as `multidev train --threads N` does)"}

    def gpu_count(self) -> int:
        mx = mxnet()
        try:
            return int(mx.context.num_gpus())
        except mx.base.MXNetError:  # a build without CUDA, or no driver
            return 0

    def max_cpu_devices(self) -> Optional[int]:
        return None  # MXNet's cpu(i) contexts: any number in one process

    def replicate(self, setup: Setup, state: State) -> "MXNetReplicas":
        from .parallel import MXNetReplicas  # loads MXNet on first use (see runtime.py)
        return MXNetReplicas(setup, state)

    # multi_process: MXNet's dist_sync kvstore, its scheduler and servers started by the core's launcher ------
    def launch(self, argv: Sequence[str], launch: Launch) -> None:
        distributed.launch(argv, launch)

    def join(self, group: ProcessGroup, local_rank: int) -> None:
        distributed.join(group)

    def leave(self) -> None:
        distributed.leave()

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        return distributed.all_sum(values)
