"""k replicas of one model on the host: split, forward/backward, AllReduce, SGD.

NumPy has no devices, so a virtual CPU device is a replica: its own copy of
every parameter and running statistic, and its own shard of each minibatch.
The replicas only ever meet in the collectives below (and in sync
BatchNorm), exactly where real devices would exchange data.
"""

from __future__ import annotations

import numpy as np

from multidev.engine import (
    DeviceShard,
    Setup,
    Shards,
    State,
    StepStats,
    running_statistic,
)
from multidev.reference import Run, backward, build, layers

Shard = DeviceShard[np.ndarray]


class NumpyReplicas:
    compile_seconds = 0.0  # nothing is compiled

    def __init__(self, setup: Setup, state: State) -> None:
        self.setup, self.spec, self.dtype = setup, setup.spec, setup.np_dtype
        self.model = build(self.spec)
        self.replicas: list[State] = []
        self.load_state(state)

    # Shard -----------------------------------------------------------------
    def place(self, shards: Shards) -> list[Shard]:
        # The copy is the "transfer to the device": a shard must not alias the caller's batch.
        ys = shards.y if shards.y is not None else [None] * len(shards.x)
        return [Shard(np.array(xi, self.dtype), None if yi is None else np.array(yi, np.int64), len(xi))
                for xi, yi in zip(shards.x, ys)]

    def shards(self, batch: list[Shard]) -> list[np.ndarray]:
        return [s.x for s in batch]

    # Forward / backward ----------------------------------------------------
    def _run(self, batch: list[Shard], train: bool, update_stats: bool = True) -> tuple[Run, list[int]]:
        """A pass over the devices with data; a device with an empty shard sits the step out."""
        active = [i for i, s in enumerate(batch) if s.size > 0]
        return Run([self.replicas[i] for i in active], train, self.setup.sync, update_stats), active

    def _backward(self, batch: list[Shard], update_stats: bool) -> tuple[StepStats, list[int], State]:
        """The gradient of the mean loss over the whole batch, summed over the devices (AllReduce)."""
        total = sum(s.size for s in batch)
        run, active = self._run(batch, train=True, update_stats=update_stats)
        if not active:
            return StepStats(0.0, 0, 0), active, {}
        # The AllReduce is the sum inside ``backward``: one array that every device then
        # uses, so the replicas apply bit-identical updates and never drift apart.
        loss, correct, grads = backward(self.model, run, [batch[i].x for i in active],
                                        [batch[i].y for i in active], total)
        return StepStats(loss, correct, total), active, grads

    def _sync_statistics(self, active: list[int]) -> None:
        """Average the running statistics over the devices that saw data, copy to all (contract: BatchNorm)."""
        for name in self.spec.statistics():
            value = running_statistic([replica[name] for replica in self.replicas], active, self.setup.sync)
            for replica in self.replicas:
                replica[name] = value.copy()

    # Protocol --------------------------------------------------------------
    def train_step(self, batch: list[Shard], lr: float) -> StepStats:
        stats, active, grads = self._backward(batch, update_stats=True)
        if active:
            for name, g in grads.items():
                step = self.dtype.type(lr) * g  # computed once: every replica subtracts the same array
                for replica in self.replicas:
                    replica[name] = replica[name] - step
            self._sync_statistics(active)
        return stats

    def gradients(self, batch: list[Shard]) -> State:
        _, _, grads = self._backward(batch, update_stats=False)
        return {name: grads[name].copy() for name in self.spec.trainable()}

    def _eval_logits(self, batch: list[Shard]) -> tuple[list[np.ndarray], list[int]]:
        run, active = self._run(batch, train=False)
        return (self.model.forward(run, [batch[i].x for i in active]) if active else []), active

    def evaluate(self, batch: list[Shard]) -> StepStats:
        logits, active = self._eval_logits(batch)
        total = sum(s.size for s in batch)
        scores = [layers.softmax_cross_entropy(z, batch[i].y, total)[:2] for z, i in zip(logits, active)]
        return StepStats(sum(loss for loss, _ in scores), sum(c for _, c in scores), total)

    def predict(self, batch: list[Shard]) -> np.ndarray:
        logits, _ = self._eval_logits(batch)  # devices in order, each its contiguous rows
        return np.concatenate(logits) if logits else np.zeros((0, self.spec.num_classes), self.dtype)

    def replica_states(self) -> list[State]:
        names = [p.name for p in self.spec.params()]
        return [{name: replica[name].copy() for name in names} for replica in self.replicas]

    def state(self) -> State:
        return self.replica_states()[0]

    def load_state(self, state: State) -> None:
        self.spec.check(state)
        # One independent float32 copy per device: updating one replica must never touch another.
        self.replicas = [{p.name: np.array(state[p.name], self.dtype) for p in self.spec.params()}
                         for _ in self.setup.devices]
