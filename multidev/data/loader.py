"""Seeded shuffling and batching, independent of any engine (contract: Split)."""

from __future__ import annotations

from typing import Iterator

import numpy as np


def epoch_order(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch: a function of (seed, epoch) alone, so resuming repeats it."""
    return np.random.default_rng([seed, epoch]).permutation(num_samples)


def batches(indices: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Consecutive minibatches; the last one is smaller, never dropped."""
    for start in range(0, len(indices), batch_size):
        yield indices[start:start + batch_size]


def num_batches(num_samples: int, batch_size: int) -> int:
    return -(-num_samples // batch_size)
