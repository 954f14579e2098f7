"""Dropout masks drawn by the core, so every engine, device count and process count drops the same units.

A framework's own generator would give each engine, and each way of
splitting a batch, other masks. Here the mask of one sample is a function of
(seed, epoch, update, dropout node, the sample's position in the update,
the value's index) alone: a counter-based hash (``multidev.rules.counter``)
turned into a uniform number, kept when it is at least the rate. Device i
gets the rows of its shard, so k devices see what one device sees, N
processes what N devices see, and a resumed run what the uninterrupted one
saw. The position counts every micro-batch of an accumulated update in
order, so accumulating changes no mask either.

Engines receive multipliers, ``keep / (1 - p)`` in the run's dtype (the
reference's order of operations), and multiply the layer's input by them.
"""

from __future__ import annotations

import math
import zlib
from typing import Sequence

import numpy as np

from multidev.rules import counter


def uniforms(seed: int, epoch: int, update: int, node: str, positions: np.ndarray, size: int) -> np.ndarray:
    """(len(positions), size) numbers in [0, 1): sample ``positions[r]``'s ``size`` values at this update."""
    return counter.uniforms((seed, epoch, update, zlib.crc32(node.encode())), positions, size)


def multipliers(seed: int, epoch: int, update: int, node: str, p: float, shape: Sequence[int],
                positions: np.ndarray, dtype=np.float32) -> np.ndarray:
    """One Dropout node's multipliers (0 or 1 / (1 - p)) for the samples at ``positions``: (n, *shape)."""
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    keep = (uniforms(seed, epoch, update, node, positions, size) >= p).astype(dtype)
    return (keep / dtype.type(1 - p)).reshape(len(positions), *shape)


def shard_masks(sites: Sequence[tuple[str, float, tuple[int, ...]]], seed: int, epoch: int, update: int,
                first: int, sizes: Sequence[int], dtype=np.float32) -> dict[str, tuple[np.ndarray, ...]]:
    """Every Dropout node's multipliers, one array per device, for shards of ``sizes`` whose first row sits
    at position ``first`` of the update."""
    bounds = np.cumsum([first, *sizes])
    out: dict[str, tuple[np.ndarray, ...]] = {}
    for node, p, shape in sites:
        out[node] = tuple(multipliers(seed, epoch, update, node, p, shape, np.arange(a, b), dtype)
                          for a, b in zip(bounds[:-1], bounds[1:]))
    return out
