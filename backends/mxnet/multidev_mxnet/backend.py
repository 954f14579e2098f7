"""The engine object the entry point returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from multidev.engine import LAYERS, MultiProcess, Setup, State

from . import bf16_support, distributed
from .devices import gpu_count
from .runtime import THREADS_ENV, load_note, mxnet, threads_note

if TYPE_CHECKING:
    from .parallel import MXNetReplicas


class MXNetBackend(MultiProcess):
    """Creating it loads nothing: MXNet loads on the first call that needs it (see runtime.py)."""

    name = "mxnet"
    #: bf16 joins these where this CPU's oneDNN computes it (see bf16_support.py)
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64", "multi_process", "optimizers",
                              "accumulate", "pending_stats", "shard_optimizer", "shard_gradients",
                              "shard_parameters", "shard_processes"})
    frameworks = ("mxnet",)
    #: every layer of the model language: the kit's layer checks hold the engine to it
    layers = frozenset(LAYERS)
    #: multi_process: MXNet's dist_sync kvstore, its scheduler and servers started by the core's launcher
    #: (launch, join, leave, all_sum)
    distributed = distributed

    def __init__(self) -> None:
        if bf16_support.bf16():
            self.capabilities = self.capabilities | {"bf16"}

    def settings(self) -> dict[str, str]:
        mxnet()  # the thread count is fixed when MXNet loads: say what it became
        return {"threads": f"{threads_note()} (read once, when MXNet loads: set {THREADS_ENV} before it "
                           f"loads, as `multidev train --threads N` does)", "kernels": load_note(),
                "bf16": bf16_support.bf16_note()}

    def gpu_count(self) -> int:
        return gpu_count()

    def max_cpu_devices(self) -> Optional[int]:
        return None  # MXNet's cpu(i) contexts: any number in one process

    def replicate(self, setup: Setup, state: State) -> "MXNetReplicas":
        from .parallel import MXNetReplicas  # loads MXNet on first use (see runtime.py)
        return MXNetReplicas(setup, state)
