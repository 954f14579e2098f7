"""The engine object the entry point returns."""

from __future__ import annotations

from typing import Optional

from multidev.engine import MultiProcess, Setup, State

from . import compile_cache, distributed, kept_steps
from .forms import CHOICES
from .devices import configure_cpu_devices, cpu_devices, cpu_devices_note, gpu_devices
from .model import BUILT
from .parallel import JaxReplicas


class JaxBackend(MultiProcess):
    """Creating it changes nothing; JAX's CPU device count is set on the first call, when a run starts."""

    name = "jax"
    capabilities = frozenset({"gpu", "virtual_cpu", "sync_batchnorm", "float64", "multi_process",
                              "sync_batchnorm_processes", "optimizers", "accumulate", "bf16",
                              "pending_stats", "shard_optimizer", "shard_gradients", "shard_parameters",
                              "shard_processes"})
    frameworks = ("jax", "jaxlib", "flax", "optax")
    #: the model language's layers model.py builds (multidev.engines.vocabulary), from its own table
    layers = BUILT
    #: multi_process: jax.distributed, its workers started by the core's launcher (launch, join, leave, all_sum)
    distributed = distributed

    def settings(self) -> dict[str, str]:
        configure_cpu_devices()
        return {"cpu devices": cpu_devices_note(), "compilation cache": compile_cache.note(),
                "kept steps": kept_steps.note(),
                **{label: choice.note() for label, choice in CHOICES.items()},
                "float64": "JAX's 64-bit mode is switched on for float64 runs only, and off again after each call"}

    def plan_cpu_devices(self, count: int) -> None:
        configure_cpu_devices(count)

    def gpu_count(self) -> int:
        configure_cpu_devices()  # the run's first question: JAX starts here
        return len(gpu_devices())

    def max_cpu_devices(self) -> Optional[int]:
        configure_cpu_devices()
        return len(cpu_devices())

    def replicate(self, setup: Setup, state: State) -> JaxReplicas:
        configure_cpu_devices()
        for choice in CHOICES.values():
            choice.pinned()  # a misspelt pin refused now, in one line, not inside the first step's compilation
        return JaxReplicas(setup, state)
