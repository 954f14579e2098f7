"""An engine's devices for a benchmark, set up as ``multidev train`` sets them up, and the shards of a batch cut for
them as the training loop cuts them."""

from __future__ import annotations

from dataclasses import replace
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


def training_shards(reps: Any, x: Any, y: Any, sizes: Any, update: int) -> Any:
    """The rows of ``x``, ``y`` cut into ``sizes`` for ``reps``, with the Dropout masks the core draws for the
    ``update``-th step of a run of seed 0 (none where the network has no Dropout)."""
    import multidev
    from multidev.rules.dropout import shard_masks

    shards = multidev.cut(x, y, sizes)
    sites = reps.setup.spec.dropouts()
    return replace(shards, masks=shard_masks(sites, 0, 1, update, 0, sizes, reps.setup.np_dtype)) if sites else shards
