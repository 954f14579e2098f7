"""An epoch's running sums, read back from the devices an update late where the engine allows it.

Reading a step's loss back makes the host wait for the device, and a host
that waits cannot queue the next step: the device then stands idle while the
host places the next batch and dispatches it. On one H100 a hand-written
Flax loop that read its loss back every step ran at 0.90 of the same loop
that did not. An engine that claims ``pending_stats`` returns a step's sums
still on its devices (:class:`~multidev.engines.protocol.PendingStats`);
the ledger reads each update's sums only after the next update has been
queued, and at once wherever the position must be exact (a checkpoint, a
stop, the epoch's end). The sums, and so every answer, are the same either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence, Union

import numpy as np

from multidev.engines.protocol import PendingStats, StepStats
from multidev.errors import MultidevError
from multidev.processes.job import Job

Stats = Union[StepStats, PendingStats]


@dataclass
class Position:
    """Where an epoch stands after ``step`` steps: what a mid-epoch checkpoint must carry to resume exactly."""

    epoch: int
    step: int = 0
    loss: float = 0.0
    correct: int = 0
    seen: int = 0
    seconds: float = 0.0


def resolved(stats: Stats) -> StepStats:
    """``stats`` as numbers on the host (waiting for the device when they are pending)."""
    return stats if isinstance(stats, StepStats) else stats.result()


def _finite(loss_sum: float, epoch: int, step: int) -> None:
    if not math.isfinite(loss_sum):
        raise MultidevError(f"training diverged at epoch {epoch}, step {step} (the loss is {loss_sum}): lower "
                            f"the learning rate; the checkpoint on disk, if any, is from before")


@dataclass
class Ledger:
    """The position booked so far, and the updates whose sums are still on the devices.

    ``late`` (one process, an engine that claims ``pending_stats``) books an
    update's sums once the next is queued; otherwise every update is booked
    as it ends, its sums and the stop flag added up over the job's processes
    in one exchange.
    """

    at: Position
    job: Job
    late: bool = False
    _pending: list[tuple[int, Sequence[Stats]]] = field(default_factory=list)

    def add(self, step: int, stats: Sequence[Stats], stop: bool) -> bool:
        """Update ``step`` has been queued with its micro-batches' ``stats``; whether the job stops after it."""
        if self.late:
            self.settle()  # the updates before this one: their wait overlaps this one's work
            self._pending.append((step, stats))
            return stop
        *sums, stopping = self.job.all_sum(np.append(_summed(stats), float(stop)))
        self._book(step, sums)
        return bool(stopping)

    def settle(self) -> Position:
        """Every queued update booked (waiting for the devices): the exact position."""
        for step, stats in self._pending:
            self._book(step, _summed(stats))
        self._pending.clear()
        return self.at

    def _book(self, step: int, sums: Sequence[float]) -> None:
        loss_sum, correct, count = sums
        _finite(loss_sum, self.at.epoch, step)
        self.at = replace(self.at, step=step, loss=self.at.loss + loss_sum, correct=self.at.correct + int(correct),
                          seen=self.at.seen + int(count))


def _summed(stats: Sequence[Stats]) -> np.ndarray:
    """An update's (loss sum, right answers, rows) over its micro-batches, read from the devices."""
    return np.sum([[s.loss_sum, s.correct, s.count] for s in map(resolved, stats)], axis=0, dtype=np.float64)
