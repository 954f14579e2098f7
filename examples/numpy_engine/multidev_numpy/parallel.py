"""k replicas of one model on the host: place the shards, forward/backward, AllReduce, update, state.

NumPy has no devices, so a virtual CPU device is a replica: its own copy of
every parameter and running statistic, and its own shard of each minibatch.
The replicas only ever meet in the collectives below (and in sync
BatchNorm), exactly where real devices would exchange data.

The shape is every engine's (``backends/*/multidev_*/parallel.py``):
``place`` returns the placed shards as a ``Placed`` list that keeps the
core's cut (``batch.host``), each shard's loss sum is divided by
``batch.host.batch`` (B, the rows of the whole update), and
``accumulate(batch)`` adds the aggregated gradient of a micro-batch to what
the replicas hold, which the next ``train_step`` adds to its own and applies
(contract: Gradient accumulation).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from multidev.engine import (DeviceShard, Placed, ReplicaStates, Setup, Shards, State, StepStats, labels, predictions,
                             running_statistic)
from multidev.reference import Run, backward, build, layers

Shard = DeviceShard[np.ndarray]
Batch = Placed[Shard]


class NumpyReplicas(ReplicaStates):
    compile_seconds = 0.0  # nothing is compiled

    def __init__(self, setup: Setup, state: State) -> None:
        self.setup, self.spec, self.dtype = setup, setup.spec, setup.np_dtype
        self.model = build(self.spec)
        self.replicas: list[State] = []
        self._held: Optional[State] = None  # the gradient of an update's micro-batches so far (None: nothing held)
        self.load_state(state)

    # Shard -----------------------------------------------------------------
    def place(self, shards: Shards) -> Batch:
        # The copy is the "transfer to the device": a shard must not alias the caller's batch.
        return Placed([Shard(np.array(xi, self.dtype), None if yi is None else np.array(yi, np.int64), len(xi))
                       for xi, yi in zip(shards.x, labels(shards))], shards)

    def shards(self, batch: Batch) -> list[np.ndarray]:
        return [s.x for s in batch]

    # Forward / backward ----------------------------------------------------
    def _run(self, batch: Batch, train: bool, update_stats: bool = True) -> tuple[Run, list[int]]:
        """A pass over the devices with data; a device with an empty shard sits the step out."""
        active, masks = batch.host.active, batch.host.masks
        # Dropout: each device multiplies by its rows of the core's masks (the same units on any device count)
        per_device = None if masks is None or not train else [{n: m[i] for n, m in masks.items()} for i in active]
        return Run([self.replicas[i] for i in active], train, self.setup.sync, update_stats, per_device), active

    def _backward(self, batch: Batch, update_stats: bool) -> tuple[StepStats, list[int], State]:
        """The gradient of the update's mean loss, summed over the devices (AllReduce)."""
        run, active = self._run(batch, train=True, update_stats=update_stats)
        if not active:
            return StepStats(0.0, 0, batch.host.total), active, {}
        # Each shard's loss sum is divided by B, the rows of the whole update (contract: Loss, gradients and the
        # update). The AllReduce is the sum inside ``backward``: one array that every device then uses, so the
        # replicas apply bit-identical updates and never drift apart.
        loss, correct, grads = backward(self.model, run, [batch[i].x for i in active],
                                        [batch[i].y for i in active], batch.host.batch)
        return StepStats(loss, correct, batch.host.total), active, grads

    def _sync_statistics(self, active: list[int]) -> None:
        """Average the running statistics over the devices that saw data, copy to all (contract: BatchNorm)."""
        for name in self.spec.statistics():
            value = running_statistic([replica[name] for replica in self.replicas], active, self.setup.sync)
            for replica in self.replicas:
                replica[name] = value.copy()

    # Protocol --------------------------------------------------------------
    def train_step(self, batch: Batch, lr: float) -> StepStats:
        stats = self.accumulate(batch)
        if self._held is not None:  # plain SGD with the sum; the next update starts afresh
            for name, g in self._held.items():
                step = self.dtype.type(lr) * g  # computed once: every replica subtracts the same array
                for replica in self.replicas:
                    replica[name] = replica[name] - step
            self._held = None
        return stats

    def accumulate(self, batch: Batch) -> StepStats:
        stats, active, grads = self._backward(batch, update_stats=True)
        if active:  # add this micro-batch's gradient to what the replicas hold; running statistics move with it
            self._held = grads if self._held is None else {n: self._held[n] + g for n, g in grads.items()}
            self._sync_statistics(active)
        return stats

    def gradients(self, batch: Batch) -> State:
        _, _, grads = self._backward(batch, update_stats=False)
        return {name: grads[name].copy() for name in self.spec.trainable()}

    def _eval_logits(self, batch: Batch) -> tuple[list[np.ndarray], list[int]]:
        run, active = self._run(batch, train=False)
        return (self.model.forward(run, [batch[i].x for i in active]) if active else []), active

    def evaluate(self, batch: Batch) -> StepStats:
        logits, active = self._eval_logits(batch)
        total = batch.host.total
        scores = [layers.softmax_cross_entropy(z, batch[i].y, total)[:2] for z, i in zip(logits, active)]
        return StepStats(sum(loss for loss, _ in scores), sum(c for _, c in scores), total)

    def predict(self, batch: Batch) -> np.ndarray:
        logits, _ = self._eval_logits(batch)  # devices in order, each its contiguous rows
        return predictions(logits, self.spec.num_classes, self.dtype)

    # State -----------------------------------------------------------------
    def replica_state(self, device: int) -> State:
        """Device ``device``'s arrays, copied: ``state()`` (device 0's) and ``replica_states()`` come from it."""
        return {p.name: self.replicas[device][p.name].copy() for p in self.spec.params()}

    def load_state(self, state: State) -> None:
        self.spec.check(state)
        # One independent copy per device: updating one replica must never touch another.
        self.replicas = [{p.name: np.array(state[p.name], self.dtype) for p in self.spec.params()}
                         for _ in self.setup.devices]
