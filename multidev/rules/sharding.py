"""The sharding rule: which rows of each array a device owns when a run shards its state (contract: Sharding).

Why one rule: as the batch split is one function every engine uses, a
sharded run's ownership is too, so every engine shards alike and a sharded
run's state gathers into the one format every checkpoint has. The rule is
PyTorch's ``Shard(0)`` placement (FSDP2, DTensor): an array of ``n`` rows
over ``k`` devices gives each device ``ceil(n / k)`` rows in order, the last
devices fewer or none; an array without rows (a scalar, as a step count)
stays whole on every device. XLA's shardings want equal parts: an engine
that pads the last parts to ``ceil(n / k)`` rows (:func:`padded_rows`) keeps
the rule.

The levels are ZeRO's stages, each sharding what the one before did and more.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from multidev.errors import MultidevError

#: what a run shards, each level adding to the one before (ZeRO's stages 0-3)
LEVELS = ("none", "optimizer", "gradients", "parameters")


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise MultidevError(f"shard must be one of {', '.join(LEVELS)} (ZeRO's stages 0-3), got {level!r}")
    return level


def owned_rows(rows: int, devices: int) -> list[tuple[int, int]]:
    """``[start, end)`` of the rows each device owns: ``ceil(rows / devices)`` each, in order, the last ones
    fewer or empty (PyTorch's ``Shard(0)``)."""
    if devices < 1:
        raise MultidevError(f"need at least one device to shard over, got {devices}")
    if rows < 0:
        raise MultidevError(f"an array has at least 0 rows, got {rows}")
    step = math.ceil(rows / devices) if rows else 0
    return [(min(i * step, rows), min((i + 1) * step, rows)) for i in range(devices)]


def padded_rows(rows: int, devices: int) -> int:
    """Rows of each device's part where every part must be equal (XLA): the rule's largest part."""
    return math.ceil(rows / devices) if rows else 0


def shard(array: np.ndarray, devices: int) -> list[np.ndarray]:
    """Each device's part of ``array`` under the rule; a scalar is every device's whole."""
    if array.ndim == 0:
        return [array] * devices
    return [array[a:b] for a, b in owned_rows(array.shape[0], devices)]


def gather(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The whole array from the devices' parts, in device order: :func:`shard` reversed."""
    if parts and parts[0].ndim == 0:
        return parts[0]
    return np.concatenate(list(parts), axis=0)


def device_bytes(shapes: Mapping[str, tuple[int, ...]], itemsize: int, devices: int, sharded: bool,
                 padded: bool = False) -> list[int]:
    """Bytes of arrays of ``shapes`` on each device: their whole on every device, or each device's rows under the
    rule (what a run records for its parameters, gradients and optimizer state per device); ``padded``: every
    device's part padded to the largest (an engine whose framework wants equal parts, as XLA's shardings)."""
    out = [0] * devices
    for shape in shapes.values():
        if not shape or not sharded:
            size = math.prod(shape) * itemsize
            out = [b + size for b in out]
            continue
        per_row = math.prod(shape[1:]) * itemsize
        rows = [padded_rows(shape[0], devices)] * devices if padded else \
            [end - start for start, end in owned_rows(shape[0], devices)]
        out = [b + n * per_row for b, n in zip(out, rows)]
    return out


def sharded_parts(level: str) -> dict[str, bool]:
    """Which of the parameters, gradients and optimizer state a level shards (ZeRO 1: the optimizer state; 2: and
    the gradients; 3: and the parameters)."""
    rank = LEVELS.index(check_level(level))
    return {"parameters": rank >= 3, "gradients": rank >= 2, "optimizer": rank >= 1}


def per_device(shapes: Mapping[str, tuple[int, ...]], slots: int, itemsize: int, devices: int,
               level: str, padded: bool = False) -> dict[str, list[int]]:
    """Bytes each of the job's devices keeps of the parameters, the reduced gradient and the optimizer state
    (``slots`` arrays of each parameter's shape) at ``level``: what a run's JSON result records (the step count,
    8 bytes, left out)."""
    parts = sharded_parts(level)
    return {part: [(slots if part == "optimizer" else 1) * b
                   for b in device_bytes(shapes, itemsize, devices, parts[part], padded)] for part in parts}
