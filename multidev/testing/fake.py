"""A tiny engine for tests of the kit and the core: the reference arithmetic behind the protocol, faults on request.

``FakeEngine()`` is ``multidev.reference`` wearing the engine protocol: one
state, copied to every device, stepped by the contract's formulas. It passes
the conformance kit, which makes it a stand-in for a real engine wherever the
core is tested. ``FakeEngine(fault=...)`` breaks one promise the way a real
engine's bug would (see :data:`FAULTS`), so a test can show that the kit
catches the bug and names the promise, without reaching into a real engine's
private methods.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .. import reference
from ..errors import MultidevError
from ..models import State
from ..protocol import Setup, StepStats
from ..shard import Shards, cut

#: fault -> the bug it plants
FAULTS = {
    "drop-remainder": "places the largest even part of the batch and drops the remaining rows",
    "skip-broadcast": "updates device 0 only; the other replicas keep their old weights",
    "count-twice": "evaluation counts one sample of every batch of several rows twice",
    "skip-allreduce": "takes the gradient of the first device's shard alone (weight n_0 / B)",
    "weigh-1/k": "weighs every shard's mean gradient 1/k instead of n_i / B",
}


class FakeEngine:
    name = "fake"
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm", "float64"})
    frameworks = ("numpy",)

    def __init__(self, fault: Optional[str] = None) -> None:
        if fault is not None and fault not in FAULTS:
            raise MultidevError(f"unknown fault {fault!r}: choose one of {', '.join(FAULTS)}")
        self.fault = fault

    def settings(self) -> dict[str, str]:
        return {}

    def gpu_count(self) -> int:
        return 0

    def max_cpu_devices(self) -> Optional[int]:
        return None

    def replicate(self, setup: Setup, state: State) -> "FakeReplicas":
        return FakeReplicas(setup, state, self.fault)


class FakeReplicas:
    compile_seconds = 0.0

    def __init__(self, setup: Setup, state: State, fault: Optional[str]) -> None:
        self.setup, self.fault = setup, fault
        self.dtype = setup.np_dtype.type  # the reference takes a scalar type
        self.load_state(state)

    def place(self, shards: Shards) -> Shards:
        k, total = len(shards.x), shards.total
        if self.fault == "drop-remainder" and total >= k:
            kept = total - total % k
            x = np.concatenate(shards.x)[:kept]
            y = None if shards.y is None else np.concatenate(shards.y)[:kept]
            shards = cut(x, y, [kept // k] * k)
        return Shards(tuple(np.array(part) for part in shards.x),
                      None if shards.y is None else tuple(np.array(part) for part in shards.y))

    def shards(self, batch: Shards) -> list[np.ndarray]:
        return list(batch.x)

    def _whole(self, batch: Shards) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(batch.x), np.concatenate(batch.y)

    def gradients(self, batch: Shards) -> State:
        spec, state, dtype = self.setup.spec, self.states[0], self.dtype
        if self.fault in ("skip-allreduce", "weigh-1/k"):
            active = batch.active[:1] if self.fault == "skip-allreduce" else batch.active
            per_shard = [reference.gradients(spec, state, batch.x[i], batch.y[i], None, self.setup.batchnorm, dtype)
                         for i in active]
            weights = [batch.sizes[active[0]] / batch.total] if self.fault == "skip-allreduce" else \
                [1 / len(active)] * len(active)
            return {name: sum(w * g[name] for w, g in zip(weights, per_shard)) for name in spec.trainable()}
        x, y = self._whole(batch)
        return reference.gradients(spec, state, x, y, batch.sizes, self.setup.batchnorm, dtype)

    def train_step(self, batch: Shards, lr: float) -> StepStats:
        x, y = self._whole(batch)
        new, loss, correct = reference.train_step(self.setup.spec, self.states[0], x, y, lr, batch.sizes,
                                                  self.setup.batchnorm, self.dtype)
        if self.fault in ("skip-allreduce", "weigh-1/k"):
            grads = self.gradients(batch)
            for name in self.setup.spec.trainable():
                new[name] = self.states[0][name] - self.dtype(lr) * grads[name]
        updated = self.states[:1] if self.fault == "skip-broadcast" else self.states
        for replica in updated:
            replica.update({name: value.copy() for name, value in new.items()})
        return StepStats(loss, correct, batch.total)

    def predict(self, batch: Shards) -> np.ndarray:
        return reference.predict(self.setup.spec, self.states[0], np.concatenate(batch.x), self.dtype)

    def evaluate(self, batch: Shards) -> StepStats:
        x, y = self._whole(batch)
        loss, correct, _ = reference.layers.softmax_cross_entropy(self.predict(batch), y.astype(np.int64), len(x))
        return StepStats(loss, correct, len(x) + (self.fault == "count-twice" and len(x) > 1))

    def state(self) -> State:
        return self.replica_states()[0]

    def replica_states(self) -> list[State]:
        return [{name: value.copy() for name, value in replica.items()} for replica in self.states]

    def load_state(self, state: State) -> None:
        self.setup.spec.check(state)
        self.states = [{p.name: np.array(state[p.name], self.dtype) for p in self.setup.spec.params()}
                       for _ in self.setup.devices]
