"""The ledger reads an update's sums once the next update is queued (pending_stats), and exactly where it must."""

import math

import numpy as np
import pytest

from multidev.data import synthetic
from multidev.engines.protocol import StepStats
from multidev.errors import MultidevError
from multidev.processes.job import Job
from multidev.testing.fake import FakeEngine
from multidev.training.api import train
from multidev.training.ledger import Ledger, Position

LENET_SHAPE = (1, 28, 28)


class Counted:
    """Pending sums that note when they are read."""

    reads: list[int] = []

    def __init__(self, step: int, loss: float, correct: int = 1, count: int = 4) -> None:
        self.step, self.stats = step, StepStats(loss, correct, count)

    def result(self) -> StepStats:
        Counted.reads.append(self.step)
        return self.stats


@pytest.fixture(autouse=True)
def fresh_reads():
    Counted.reads = []


def test_late_ledger_books_an_update_once_the_next_is_queued():
    ledger = Ledger(Position(1), Job(), late=True)
    assert ledger.add(1, [Counted(1, 2.0)], stop=False) is False
    assert Counted.reads == [] and ledger.at.step == 0
    ledger.add(2, [Counted(2, 1.0), Counted(2, 0.5)], stop=False)  # two micro-batches
    assert Counted.reads == [1] and ledger.at == Position(1, step=1, loss=2.0, correct=1, seen=4)
    assert ledger.add(3, [Counted(3, 0.25)], stop=True) is True  # a stop is known before the sums are read
    assert ledger.settle() == Position(1, step=3, loss=3.75, correct=4, seen=16)
    assert Counted.reads == [1, 2, 2, 3]


def test_waiting_ledger_books_each_update_at_once():
    ledger = Ledger(Position(2, step=4, loss=1.0, correct=2, seen=8), Job())
    assert ledger.add(5, [StepStats(0.5, 3, 4)], stop=False) is False
    assert ledger.at == Position(2, step=5, loss=1.5, correct=5, seen=12)
    assert ledger.add(6, [StepStats(0.5, 0, 4)], stop=True) is True


def test_a_diverged_update_is_named_when_its_sums_are_read():
    ledger = Ledger(Position(1), Job(), late=True)
    ledger.add(1, [Counted(1, 1.0)], stop=False)
    ledger.add(2, [Counted(2, math.nan)], stop=False)
    with pytest.raises(MultidevError, match="training diverged at epoch 1, step 2 .*lower the learning rate"):
        ledger.add(3, [Counted(3, 1.0)], stop=False)


class Noting:
    """The fake engine's replicas, noting each step queued and each step's sums read."""

    def __init__(self, inner, events):
        self._inner, self._events = inner, events

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _queued(self):
        step = sum(e[0] == "queued" for e in self._events) + 1
        self._events.append(("queued", step))
        return step

    def train_step(self, batch, lr):
        out = self._inner.train_step(batch, lr)
        self._events.append(("read", self._queued()))
        return out

    def queue_step(self, batch, lr):
        out, step, events = self._inner.queue_step(batch, lr), self._queued(), self._events

        class Read:
            def result(self):
                events.append(("read", step))
                return out.result()
        return Read()


class NotingEngine(FakeEngine):
    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, int]] = []

    def replicate(self, setup, state):
        return Noting(super().replicate(setup, state), self.events)


def test_the_loop_queues_the_next_step_before_reading_and_answers_as_waiting(tmp_path):
    data = synthetic(n_train=40, n_test=8, shape=LENET_SHAPE)
    kwargs = dict(model="lenet", dataset=data, batch_size=8, lr=0.1, seed=3, epochs=2)
    late_engine, waiting_engine = NotingEngine(), NotingEngine()
    late = train(late_engine, **kwargs)
    waited = train(waiting_engine, late_sums=False, **kwargs)
    assert waiting_engine.events == [(e, step) for step in range(1, 11) for e in ("queued", "read")]
    events = late_engine.events
    steps = max(step for _, step in events)
    assert steps == 10  # 5 updates an epoch
    for step in range(1, steps + 1):
        read = events.index(("read", step))
        if step % 5:  # within an epoch: read once the next update is queued, before the one after it
            assert events.index(("queued", step + 1)) < read, events
            assert ("queued", step + 2) not in events or read < events.index(("queued", step + 2)), events
    assert [(e.loss, e.train_acc, e.test_acc) for e in late.epochs] == \
        [(e.loss, e.train_acc, e.test_acc) for e in waited.epochs]
    assert np.isfinite(late.epochs[-1].loss)
