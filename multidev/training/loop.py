"""One pass over the training set: micro-batches, updates, progress and a stop between steps."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from multidev.data import Dataset, batches, epoch_order, num_batches
from multidev.engines.protocol import Replicas
from multidev.errors import MultidevError
from multidev.processes.job import Job
from multidev.rules.split import shard_sizes
from multidev.training.prefetch import ahead


@dataclass
class Position:
    """Where an epoch stands after ``step`` steps: what a mid-epoch checkpoint must carry to resume exactly."""

    epoch: int
    step: int = 0
    loss: float = 0.0
    correct: int = 0
    seen: int = 0
    seconds: float = 0.0


def train_epoch(replicas: Replicas, data: Dataset, *, epoch: int, seed: int, batch_size: int, lr: float,
                weights: Optional[Sequence[float]] = None, progress: bool = False,
                start: Optional[Position] = None, stop: object = False,
                on_step: Optional[Callable[[int, bool], None]] = None, job: Job = Job(),
                rate: Optional[Callable[[int], float]] = None, accumulate: int = 1,
                prefetch: bool = True) -> tuple[float, float, float]:
    """One pass over the training set; returns (mean loss, accuracy, seconds without compilation).

    An update takes ``accumulate`` micro-batches of ``batch_size`` rows (the
    last ones of an epoch shorter) at the rate ``rate(step)`` (step counted in
    the epoch; ``lr`` when None). The next micro-batch is placed while the
    current one runs (``prefetch``). ``start`` resumes mid-epoch; when ``stop``
    turns true between two updates the epoch ends early by raising
    :class:`_Stopped` with its position. ``on_step(step, last_of_epoch)`` runs
    after every update. In a job of several processes every rank stops at the
    same step when any of them got the signal.
    """
    k = len(replicas.setup.devices)
    at = start or Position(epoch)
    order = epoch_order(len(data.x_train), seed, epoch)
    total_steps = num_batches(len(order), batch_size * accumulate)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=total_steps, initial=at.step, desc=f"epoch {epoch}", unit="batch", leave=False)
    compiled_before = replicas.compile_seconds
    clock = time.perf_counter()

    def seconds() -> float:
        return at.seconds + time.perf_counter() - clock - (replicas.compile_seconds - compiled_before)

    done = at.step

    def micro_batches():
        for step, idx in enumerate(batches(order, batch_size * accumulate), start=1):
            if step > done:
                parts = list(batches(idx, batch_size))
                for j, part in enumerate(parts):
                    yield step, j == len(parts) - 1, part, len(idx) if accumulate > 1 else None

    def place(item):
        step, last, part, whole = item
        sizes = shard_sizes(len(part), k * job.group.size, weights)
        return step, last, replicas.place(job.shards(data.x_train, data.y_train, part, sizes, k, whole))

    sums = np.zeros(3)
    try:
        for step, last, placed in ahead(place, micro_batches(), depth=1 if prefetch else 0):
            step_lr = lr if rate is None else rate(step)
            stats = (replicas.train_step(placed, step_lr) if accumulate == 1 else
                     replicas.train_step(placed, step_lr, update=last))
            sums += (stats.loss_sum, stats.correct, stats.count)
            if not last:
                continue
            loss_sum, correct, count, stopping = job.all_sum(np.append(sums, float(bool(stop))))
            sums = np.zeros(3)
            if not math.isfinite(loss_sum):
                raise MultidevError(f"training diverged at epoch {epoch}, step {step} (the loss is "
                                    f"{loss_sum}): lower the learning rate; the checkpoint on disk, if "
                                    f"any, is from before")
            at = Position(epoch, step, at.loss + loss_sum, at.correct + int(correct), at.seen + int(count), at.seconds)
            if bar is not None:
                bar.update()
                bar.set_postfix(loss=f"{at.loss / at.seen:.3f}", refresh=False)
            if on_step is not None:
                on_step(step, step == total_steps)
            if stopping and step < total_steps:
                at.seconds = seconds()
                raise _Stopped(at)
    finally:
        if bar is not None:
            bar.close()
    return at.loss / at.seen, at.correct / at.seen, seconds()


class _Stopped(Exception):
    def __init__(self, position: Position) -> None:
        self.position = position
