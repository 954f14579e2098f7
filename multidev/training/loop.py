"""One pass over the training set: micro-batches, updates, progress and a stop between steps."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Optional

import numpy as np

from multidev.data import Dataset, batches, epoch_order, num_batches
from multidev.data.transforms import Transforms
from multidev.engines import activity
from multidev.engines.protocol import Replicas
from multidev.processes.job import Job
from multidev.rules.dropout import shard_masks
from multidev.rules.split import Shards, shard_sizes
from multidev.settings.run import Settings
from multidev.training.ledger import Ledger, Position
from multidev.training.prefetch import ahead


class Stopped(Exception):
    """The epoch ended early on a signal, at ``position``."""

    def __init__(self, position: Position) -> None:
        self.position = position


def steps_per_epoch(data: Dataset, s: Settings) -> int:
    """Updates in one pass over ``data``: each of ``accumulate`` micro-batches of ``batch_size`` rows."""
    return num_batches(len(data.x_train), s.batch_size * s.accumulate)


@dataclass(frozen=True)
class Epoch:
    """What one epoch trains on: the data, its seeded order, the rate of each update and the job's rows."""

    number: int
    data: Dataset
    settings: Settings
    seed: int
    rate: Callable[[int], float]  # update (counted in the epoch, from 1) -> learning rate
    job: Job = Job()
    transforms: Transforms = Transforms()

    @property
    def update_rows(self) -> int:
        return self.settings.batch_size * self.settings.accumulate

    def steps(self) -> int:
        return steps_per_epoch(self.data, self.settings)

    def micro_batches(self, done: int) -> Iterator[tuple[int, bool, np.ndarray, Optional[int], int]]:
        """(update, last micro-batch of it, rows, rows of the whole update or None, position of its first row
        in the update) after update ``done``."""
        order = epoch_order(len(self.data.x_train), self.seed, self.number)
        accumulate, size = self.settings.accumulate, self.settings.batch_size
        for step, idx in enumerate(batches(order, self.update_rows), start=1):
            if step > done:
                parts = list(batches(idx, size))
                for j, part in enumerate(parts):
                    yield step, j == len(parts) - 1, part, len(idx) if accumulate > 1 else None, j * size

    def shards(self, replicas: Replicas, step: int, part: np.ndarray, whole: Optional[int], first: int) -> Shards:
        """This process's shards of one micro-batch (augmented and normalised when the run says so), with the core's
        Dropout masks when the model has Dropout."""
        k, s, data = len(replicas.setup.devices), self.settings, self.data
        sizes = shard_sizes(len(part), k * self.job.group.size, s.shard_weights)
        x = self.transforms.train(data.x_train, self.seed, self.number)
        shards = self.job.shards(x, data.y_train, part, sizes, k, whole)
        sites = replicas.setup.spec.dropouts()
        if not sites:
            return shards
        first += sum(sizes[:shards.offset])
        masks = shard_masks(sites, self.seed, self.number, step, first, shards.sizes, replicas.setup.np_dtype)
        return replace(shards, masks=masks)


#: seconds between the bar's refreshes while a step runs
TICK = 1.0


@contextlib.contextmanager
def _progress(show: bool, total: int, initial: int, epoch: int):
    if not show:
        yield None
        return
    from tqdm.auto import tqdm
    bar = tqdm(total=total, initial=initial, desc=f"epoch {epoch}", unit="batch", leave=False)
    running = threading.Event()
    ticker = threading.Thread(target=_tick, args=(bar, running), daemon=True)
    ticker.start()
    try:
        yield bar
    finally:
        running.set()
        ticker.join()
        bar.close()


def _tick(bar, done: threading.Event) -> None:
    """The bar's clock goes on while a step runs, saying what the engine is busy with (``activity.current``): a
    JAX step compiling and timing this CPU's forms can take half a minute, and a bar that stands still meanwhile
    reads as a hang."""
    before: Optional[str] = None  # what the bar said before the engine got busy
    while not done.wait(TICK):
        busy = activity.current()
        if busy is not None:
            before = (bar.postfix or "") if before is None else before
            bar.set_postfix_str(busy, refresh=False)
        elif before is not None:
            bar.set_postfix_str(before, refresh=False)
            before = None
        bar.refresh()


def train_epoch(replicas: Replicas, epoch: Epoch, *, start: Optional[Position] = None, stop: object = False,
                on_step: Optional[Callable[[int, Callable[[], Position], bool], None]] = None,
                pending: bool = False) -> tuple[float, float, float]:
    """One pass over the training set; returns (mean loss, accuracy, seconds without compilation).

    An update takes ``accumulate`` micro-batches of ``batch_size`` rows (the
    last ones of an epoch shorter) at the rate ``epoch.rate(step)``. The next
    micro-batch is placed while the current one runs (``prefetch``).
    ``start`` resumes mid-epoch; when ``stop`` turns true between two updates
    the epoch ends early by raising :class:`Stopped` with its position.
    ``on_step(step, position, last_of_epoch)`` runs after every update,
    before the next is queued; ``position()`` gives the exact position
    (waiting for the devices). ``pending`` (an engine that claims
    ``pending_stats``; one process, ``late_sums`` on) reads each update's sums
    back once the next is queued (:class:`Ledger`). In a job of several processes every
    rank stops at the same step when any of them got the signal.
    """
    s, job = epoch.settings, epoch.job
    at, total = start or Position(epoch.number), epoch.steps()
    compiled_before, clock = replicas.compile_seconds, time.perf_counter()
    ledger = Ledger(at, job, late=pending and s.late_sums and job.group.size == 1)
    update, add = (replicas.queue_step, replicas.queue_accumulate) if ledger.late else \
        (replicas.train_step, getattr(replicas, "accumulate", None))

    def position() -> Position:
        return replace(ledger.settle(), seconds=at.seconds + time.perf_counter() - clock
                       - (replicas.compile_seconds - compiled_before))

    def place(item):
        step, last, part, whole, first = item
        return step, last, replicas.place(epoch.shards(replicas, step, part, whole, first))

    micro: list = []
    with _progress(s.progress, total, at.step, epoch.number) as bar:
        for step, last, placed in ahead(place, epoch.micro_batches(at.step), depth=1 if s.prefetch else 0):
            micro.append(update(placed, epoch.rate(step)) if last else add(placed))
            if not last:
                continue
            stopping = ledger.add(step, micro, bool(stop))
            micro = []
            if bar is not None:
                bar.update()
                if ledger.at.seen:
                    bar.set_postfix(loss=f"{ledger.at.loss / ledger.at.seen:.3f}", refresh=False)
            if on_step is not None:
                on_step(step, position, step == total)
            if stopping and step < total:
                raise Stopped(position())
    done = position()
    return done.loss / done.seen, done.correct / done.seen, done.seconds
