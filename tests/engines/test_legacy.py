"""An engine written to the earlier protocol (one train_step with update= and pending= flags) keeps working."""

import pytest

from multidev.data import synthetic
from multidev.engines.legacy import LegacyReplicas, is_legacy
from multidev.testing import LENET
from multidev.testing.fake import FakeEngine
from multidev.training.api import train

RUN = dict(model="lenet", batch_size=8, lr=0.1, seed=3, epochs=2, accumulate=2, progress=False)


class OldStyle:
    """Replicas as a third party wrote them against the earlier protocol."""

    def __init__(self, inner):
        self._inner, self.calls = inner, []

    def __getattr__(self, name):
        if name in ("accumulate", "queue_step", "queue_accumulate"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def train_step(self, batch, lr, *, update=True, pending=False):
        self.calls.append((update, pending))
        held = self._inner.queue_step(batch, lr) if update else self._inner.queue_accumulate(batch)
        return held if pending else held.result()


class OldEngine(FakeEngine):
    def __init__(self):
        super().__init__()
        self.made = []

    def replicate(self, setup, state):
        self.made.append(OldStyle(super().replicate(setup, state)))
        return self.made[-1]


@pytest.mark.parametrize("late_sums", [True, False])
def test_an_old_engine_trains_as_today_s_with_a_warning(late_sums):
    data = synthetic(n_train=40, n_test=8, shape=LENET.in_shape)
    old = OldEngine()
    with pytest.warns(DeprecationWarning, match="update=/pending= flags: split it into train_step"):
        got = train(old, dataset=data, late_sums=late_sums, **RUN)
    want = train(FakeEngine(), dataset=data, late_sums=late_sums, **RUN)
    assert [(e.loss, e.train_acc, e.test_acc) for e in got.epochs] == \
        [(e.loss, e.train_acc, e.test_acc) for e in want.epochs]
    calls = set(old.made[0].calls)
    assert (False, late_sums) in calls and (True, late_sums) in calls, calls  # micro-batches and updates both


def test_today_s_replicas_are_not_wrapped():
    engine = FakeEngine()
    from multidev.engines.protocol import Setup, replicate
    from multidev.rules.devices import Device
    reps = replicate(engine, Setup(LENET, (Device("cpu", 0),)), LENET.init(0))
    assert not is_legacy(reps) and not isinstance(reps, LegacyReplicas)
