"""The processes a training loop runs in: which rows each reads, how sums reach every rank,
and the check that every rank was started with the same settings.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from multidev.errors import MultidevError
from multidev.processes.group import ProcessGroup
from multidev.rules.split import Shards, cut, cut_for_process


def digest(settings: Mapping[str, object]) -> int:
    """A number every rank computes from its settings: equal numbers, equal settings (checked before step one)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")  # exact in a float64


def differing(digests: list[int]) -> Optional[str]:
    """One line naming the ranks whose settings are not rank 0's, or None when all agree."""
    others = [r for r, d in enumerate(digests) if d != digests[0]]
    if not others:
        return None
    which = f"rank {others[0]} was" if len(others) == 1 else f"ranks {', '.join(map(str, others))} were"
    return (f"{which} started with other settings than rank 0 (engine, model, "
            f"data, epochs, batch size, learning rate, seed, BatchNorm, dtype, devices or resuming): start every "
            f"process with the same command")


def _alone(values: np.ndarray) -> np.ndarray:
    return values


@dataclass(frozen=True)
class Job:
    """The processes a training loop runs in: which rows this one reads, and how sums reach every rank."""

    group: ProcessGroup = field(default_factory=ProcessGroup)
    all_sum: Callable[[np.ndarray], np.ndarray] = _alone

    @property
    def writer(self) -> bool:
        """Rank 0 alone writes checkpoints, results and plots, and shows progress."""
        return self.group.rank == 0

    def check_agreement(self, settings: Mapping[str, object]) -> None:
        """One line, on every rank, when any rank was started with other ``settings`` than rank 0."""
        digests = np.zeros(self.group.size)
        digests[self.group.rank] = float(digest(settings))
        problem = differing([int(d) for d in self.all_sum(digests)])
        if problem:
            raise MultidevError(problem)

    def shards(self, x: np.ndarray, y: Optional[np.ndarray], index: np.ndarray, sizes: Sequence[int],
               devices: int, whole: Optional[int] = None) -> Shards:
        """This process's part of the minibatch ``x[index]`` cut by ``sizes`` over all devices of the job.

        ``whole``: the rows of the update this minibatch is a micro-batch of.
        """
        if self.group.size == 1:
            shards = cut(x[index], None if y is None else y[index], sizes)
        else:
            shards = cut_for_process(x, y, index, sizes, self.group.rank, devices)
        return shards if whole is None else replace(shards, whole=whole)
