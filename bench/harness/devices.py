"""An engine's devices for a benchmark, set up as ``multidev train`` sets them up."""

from __future__ import annotations

from typing import Any


def run_devices(engine: Any, k: int, gpu: bool = False) -> list:
    """``k`` GPUs (``gpu``) or ``k`` CPU devices, after the engine is told of ``k`` CPU devices before any other call,
    as a run tells it (``multidev.training.run``: a request of GPUs plans as many CPU devices to fall back to)."""
    import multidev
    from multidev.engine import plan_cpu_devices

    plan_cpu_devices(engine, k)
    if gpu:
        return multidev.resolve_devices(gpus=k, gpu_count=engine.gpu_count())
    return multidev.resolve_devices(devices=k, max_cpu=engine.max_cpu_devices())
