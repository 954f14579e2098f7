"""Random numbers that are a function of their coordinates alone (Dropout masks, augmentation).

A framework's generator, or one advanced in the order samples happen to be
read, gives other numbers on each engine, device count and process count.
Here a number is a counter-based hash of (key parts, position, value index):
splitmix64's finaliser, chained over the key parts, turned into a float64 in
[0, 1) from its top 53 bits. Any process computes any sample's numbers
without reading the others.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of 64-bit words whose output bits all depend on every input bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _word(value: int) -> np.ndarray:
    return np.array(value & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)


def uniforms(key: Sequence[int], positions: np.ndarray, size: int) -> np.ndarray:
    """(len(positions), size) numbers in [0, 1): the ``size`` values of each position under ``key``."""
    with np.errstate(over="ignore"):  # 64-bit words wrap around by design
        word = _mix(_word(key[0]) + _GOLDEN)
        for part in key[1:]:
            word = _mix(word ^ _mix(_word(part) + _GOLDEN))
        rows = _mix(word ^ _mix(np.asarray(positions, np.uint64) + _GOLDEN))
        values = _mix(rows[:, None] ^ (np.arange(size, dtype=np.uint64)[None, :] * _GOLDEN))
    return (values >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
