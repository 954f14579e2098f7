"""contract: Input pipeline (pending step sums): read late, a step's sums and its run are what waiting gives."""

from __future__ import annotations

from typing import Any

import numpy as np

from multidev.data import synthetic
from multidev.outputs import checkpoint as ckpt
from multidev.rules.split import cut, shard_sizes
from multidev.testing._helpers import LENET, assert_states_close, batch
from multidev.testing.kit import SAME_ENGINE_RTOL, EngineFixtures
from multidev.training.api import train


class PendingChecks(EngineFixtures):
    """Engines that claim ``pending_stats``: sums read after later steps ran, and whole runs, against waiting."""

    def test_sums_read_after_later_steps_are_each_steps_own(self, engine):
        self.require(engine, "pending_stats")
        k = self.two_or_one(engine)
        late, waited = (self.make(engine, LENET, k, seed=3) for _ in range(2))
        batches = [batch(LENET, 12, seed=20 + step) for step in range(3)]
        placed = [(x, y, shard_sizes(12, k)) for x, y in batches]
        held = [late.queue_step(late.place(cut(x, y, sizes)), lr=0.2) for x, y, sizes in placed]
        got = [h.result() for h in held]  # read once every step has been queued
        want = [waited.train_step(waited.place(cut(x, y, sizes)), lr=0.2) for x, y, sizes in placed]
        for step, (g, w) in enumerate(zip(got, want), start=1):
            assert (g.correct, g.count) == (w.correct, w.count) and np.isclose(
                g.loss_sum, w.loss_sum, rtol=SAME_ENGINE_RTOL, atol=0), (
                f"pending sums: step {step} of 3 on {k} device(s), read after the later steps were queued, says "
                f"{g}; waiting for it said {w}")
        assert_states_close(late.state(), waited.state(), rtol=SAME_ENGINE_RTOL,
                            promise="pending sums: a step returned before its sums were read trains otherwise")

    def test_run_equals_the_run_that_waits(self, engine, tmp_path):
        self.require(engine, "pending_stats")
        k = self.two_or_one(engine)
        data = synthetic(n_train=56, n_test=12, shape=LENET.in_shape)
        kwargs: dict[str, Any] = dict(devices=k, model="lenet", dataset=data, batch_size=8, lr=0.1, seed=5,
                                      epochs=2, checkpoint_every=3)
        late = train(engine, checkpoint=tmp_path / "late.npz", **kwargs)
        waited = train(engine, checkpoint=tmp_path / "waited.npz", late_sums=False, **kwargs)
        for got, want in zip(late.epochs, waited.epochs):
            assert np.allclose([got.loss, got.train_acc, got.test_acc], [want.loss, want.train_acc, want.test_acc],
                               rtol=SAME_ENGINE_RTOL, atol=0), (
                f"pending sums: epoch {got.epoch} on {k} device(s) reads {got}, the run that waited {want}")
        assert_states_close(ckpt.load(tmp_path / "late.npz")[1], ckpt.load(tmp_path / "waited.npz")[1],
                            rtol=SAME_ENGINE_RTOL, promise="pending sums: the run's weights differ from waiting's")
