"""Capabilities: what an engine claims, what a run needs, and the one line when they part.

The conformance kit skips the checks of what an engine does not claim, and the core
refuses a run that needs more before any engine code runs.
"""

from __future__ import annotations

from typing import Protocol

from multidev.errors import MultidevError
from multidev.rules.optimizers import Optimizer

#: Capabilities an engine may claim; the conformance kit skips what is not claimed.
CAPABILITIES = frozenset({
    "gpu",              # can place replicas on CUDA GPUs
    "virtual_cpu",      # k > 1 CPU devices in one process (contract: Devices)
    "sync_batchnorm",   # batchnorm="sync": whole-minibatch statistics
    "multi_process",    # a process group of more than one process (contract: Process groups)
    "sync_batchnorm_processes",  # batchnorm="sync" whose statistics span the processes of a group
    "float64",          # dtype="float64": the float64 runs that float32 answers are judged against
    "optimizers",       # every Optimizer (momentum, Nesterov, weight decay, adamw) and its state (OptimizerState)
    "accumulate",       # Accumulates.accumulate: gradients of micro-batches added up before one update
    "bf16",             # precision="bf16": compute in bfloat16, parameters and optimizer state in float32
    "pending_stats",    # QueuesSteps: steps that return their sums before the step ends (PendingStats)
    "shard_optimizer",  # shard="optimizer": each device keeps its rows of the optimizer state (ZeRO 1)
    "shard_gradients",  # shard="gradients": and its rows of the reduced gradient, reduce-scattered (ZeRO 2)
    "shard_parameters",  # shard="parameters": and its rows of the parameters, gathered when a step needs them (ZeRO 3)
    "shard_processes",  # a sharded run whose devices span the processes of a group
})


def needed(*, dtype: str, batchnorm: str, processes: int, cpu_devices: int = 1, gpus: int = 0,
           optimizer: Optimizer = Optimizer(), accumulate: int = 1, precision: str = "fp32",
           shard: str = "none") -> frozenset[str]:
    """The capabilities a run of these settings asks of an engine (one rule for replicas and launchers)."""
    wanted = set()
    if not optimizer.plain:
        wanted.add("optimizers")
    if accumulate > 1:
        wanted.add("accumulate")
    if precision == "bf16":
        wanted.add("bf16")
    if dtype == "float64":
        wanted.add("float64")
    if batchnorm == "sync":
        wanted.add("sync_batchnorm")
    if cpu_devices > 1:
        wanted.add("virtual_cpu")
    if gpus:
        wanted.add("gpu")
    if shard != "none":
        wanted.add(f"shard_{shard}")
        if processes > 1:
            wanted.add("shard_processes")
    if processes > 1:
        wanted.add("multi_process")
        if batchnorm == "sync":
            wanted.add("sync_batchnorm_processes")
    return frozenset(wanted)


class Claims(Protocol):
    """What the capability check reads of an engine (every Backend has it)."""

    name: str
    capabilities: frozenset[str]


def check_claims(engine: Claims, needs: frozenset[str]) -> None:
    """One line when the engine does not claim every capability a run needs."""
    missing = sorted(needs - engine.capabilities)
    if missing:
        raise MultidevError(f"the {engine.name} engine does not offer {', '.join(missing)}: {_instead[missing[0]]}")


_instead = {
    "float64": "leave dtype at float32",
    "sync_batchnorm": "use --batchnorm local",
    "virtual_cpu": "use one CPU device",
    "gpu": "use CPU devices",
    "multi_process": "run one process",
    "sync_batchnorm_processes": "use --batchnorm local with processes, or one process with several devices",
    "optimizers": "use plain SGD (no momentum, no weight decay)",
    "accumulate": "use --accumulate 1 and a smaller batch",
    "bf16": "use --precision fp32",
    "shard_optimizer": "use --shard none (every device keeps the whole state)",
    "shard_gradients": "use --shard optimizer or none",
    "shard_parameters": "use --shard gradients, optimizer or none",
    "shard_processes": "shard over the devices of one process (--processes 1), or use --shard none",
}
