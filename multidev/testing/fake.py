"""A tiny engine for tests of the kit and the core: the reference arithmetic behind the protocol, faults on request.

``FakeEngine()`` is ``multidev.reference`` wearing the engine protocol: one
state, copied to every device, stepped by the contract's formulas. It passes
the conformance kit, which makes it a stand-in for a real engine wherever the
core is tested. ``FakeEngine(fault=...)`` breaks one promise the way a real
engine's bug would (see :data:`FAULTS`), so a test can show that the kit
catches the bug and names the promise, without reaching into a real engine's
private methods.

``registered(folder, ...)`` makes engines like it (or any ``module:attribute``)
installed for child processes, so that the ``multidev`` command itself runs them.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from multidev import reference
from multidev.engines.idioms import WaitedSteps
from multidev.engines.protocol import Setup, StepStats
from multidev.engines.registry import GROUP
from multidev.errors import MultidevError
from multidev.rules import optimizers as optim
from multidev.nn.graph import Graph, NodeSpec
from multidev.nn.layers import AvgPool2d, BatchNorm, MaxPool2d
from multidev.nn.zoo import ZOO
from multidev.rules.models import ModelSpec, State
from multidev.rules.split import Shards, cut

#: fault -> the bug it plants
FAULTS = {
    "drop-remainder": "places the largest even part of the batch and drops the remaining rows",
    "skip-broadcast": "updates device 0 only; the other replicas keep their old weights",
    "count-twice": "evaluation counts one sample of every batch of several rows twice",
    "drop-a-sample": "evaluation leaves the last sample of every batch of several rows out of its sums and count",
    "softmax-predict": "prediction returns probabilities (the softmax of the logits) instead of logits",
    "skip-allreduce": "takes the gradient of the first device's shard alone (weight n_0 / B)",
    "weigh-1/k": "weighs every shard's mean gradient 1/k instead of n_i / B",
    "decoupled-sgd-decay": "decays sgd's weights apart from the gradient (w *= 1 - lr * decay), as AdamW does",
    "maxpool-averages": "builds MaxPool2d as average pooling",
    "shared-sums": "a pending step's sums sit in one buffer that every later step overwrites",
    "pair-local-sync": "on exactly two devices, a user's definition (no zoo network) asked for sync BatchNorm "
                       "normalises each shard by its own statistics",
    "bn-eps": "builds BatchNorm with eps 1e-3 whatever the definition says",
    "flip-relus": "in float32, the first update's gradient takes the ReLU inputs nearest 0 on the other side of "
                  "the kink, as rounding can (float64 runs are untouched)",
}

#: the share of each ReLU's inputs, nearest 0, that the "flip-relus" fault flips
FLIPPED = 0.01


class FakeEngine:
    name = "fake"
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm", "float64", "optimizers", "accumulate",
                              "pending_stats"})
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


class Held:
    """A step's sums kept for a later read (``pending_stats``), as an engine whose device runs behind would."""

    def __init__(self, row: np.ndarray, count: int) -> None:
        self.row, self.count = row, count

    def result(self) -> StepStats:
        return StepStats(float(self.row[0]), int(self.row[1]), self.count)


def _batchnorm(setup: Setup, fault: Optional[str]) -> str:
    """The BatchNorm mode this engine runs (the "pair-local-sync" fault: a two-device path that skips the exchange)."""
    if fault == "pair-local-sync" and len(setup.devices) == 2 and setup.spec.name not in ZOO:
        return "local"
    return setup.batchnorm


def _built(spec: ModelSpec, fault: Optional[str]) -> ModelSpec:
    if fault == "maxpool-averages":
        swap = {MaxPool2d: lambda layer: AvgPool2d(layer.kernel_size, layer.stride)}
    elif fault == "bn-eps":
        swap = {BatchNorm: lambda layer: replace(layer, eps=1e-3)}
    else:
        return spec
    nodes = tuple(NodeSpec(n.name, swap[type(n.layer)](n.layer), n.inputs) if type(n.layer) in swap else n
                  for n in spec.graph.nodes)
    return ModelSpec(spec.name, spec.in_shape, spec.num_classes, Graph(nodes))


@contextmanager
def _flipped_relus():
    """The reference's ReLU with its inputs nearest 0 (:data:`FLIPPED` of them) on the other side of the kink."""
    relu = reference.layers.relu

    def flipping(x: np.ndarray):
        _, mask = relu(x)
        nearest = np.argsort(np.abs(x), axis=None)[:max(1, int(FLIPPED * x.size))]
        mask = mask.copy()
        mask.flat[nearest] = ~mask.flat[nearest]
        return x * mask, mask

    reference.layers.relu = flipping
    try:
        yield
    finally:
        reference.layers.relu = relu


class FakeReplicas(WaitedSteps):
    compile_seconds = 0.0

    def __init__(self, setup: Setup, state: State, fault: Optional[str]) -> None:
        self.setup, self.fault = setup, fault
        self.spec = _built(setup.spec, fault)  # the network as this engine builds it
        self.batchnorm = _batchnorm(setup, fault)
        self.dtype = setup.np_dtype.type  # the reference takes a scalar type
        self.load_state(state)
        self.load_optimizer_state(setup.optimizer.init_state(setup.spec, self.dtype))
        self._held: Optional[State] = None  # the gradient summed over the micro-batches so far
        self._sums = np.zeros(2)  # the "shared-sums" fault's one buffer
        self._flips = fault == "flip-relus" and self.dtype is np.float32  # float64 computes past rounding's flips

    def place(self, shards: Shards) -> Shards:
        k, total = len(shards.x), shards.total
        if self.fault == "drop-remainder" and total >= k:
            kept = total - total % k
            x = np.concatenate(shards.x)[:kept]
            y = None if shards.y is None else np.concatenate(shards.y)[:kept]
            shards = cut(x, y, [kept // k] * k)
        return Shards(tuple(np.array(part) for part in shards.x),
                      None if shards.y is None else tuple(np.array(part) for part in shards.y), whole=shards.whole,
                      masks=shards.masks)

    def shards(self, batch: Shards) -> list[np.ndarray]:
        return list(batch.x)

    def _whole(self, batch: Shards) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(batch.x), np.concatenate(batch.y)

    @staticmethod
    def _masks(batch: Shards, devices: Optional[list[int]] = None) -> Optional[dict[str, np.ndarray]]:
        """The whole batch's Dropout multipliers (or those of ``devices``' shards), as the reference takes them."""
        if batch.masks is None:
            return None
        pick = range(len(batch.x)) if devices is None else devices
        return {name: np.concatenate([parts[i] for i in pick]) for name, parts in batch.masks.items()}

    def gradients(self, batch: Shards) -> State:
        if self._flips:
            self._flips = False
            with _flipped_relus():
                return self.gradients(batch)
        spec, state, dtype = self.spec, self.states[0], self.dtype
        if self.fault in ("skip-allreduce", "weigh-1/k"):
            active = batch.active[:1] if self.fault == "skip-allreduce" else batch.active
            per_shard = [reference.gradients(spec, state, batch.x[i], batch.y[i], None, self.batchnorm, dtype,
                                             self._masks(batch, [i])) for i in active]
            weights = [batch.sizes[active[0]] / batch.total] if self.fault == "skip-allreduce" else \
                [1 / len(active)] * len(active)
            return {name: sum(w * g[name] for w, g in zip(weights, per_shard)) for name in spec.trainable()}
        x, y = self._whole(batch)
        grads = reference.gradients(spec, state, x, y, batch.sizes, self.batchnorm, dtype, self._masks(batch))
        share = dtype(len(x) / batch.batch)  # a micro-batch's rows over the whole update's
        return grads if share == 1 else {name: g * share for name, g in grads.items()}

    def queue_step(self, batch: Shards, lr: float) -> Held:
        return self._held_sums(self._step(batch, lr, update=True))

    def queue_accumulate(self, batch: Shards) -> Held:
        return self._held_sums(self._step(batch, 0.0, update=False))

    def _held_sums(self, stats: StepStats) -> Held:
        row = self._sums if self.fault == "shared-sums" else np.zeros(2)
        row[:] = stats.loss_sum, stats.correct
        return Held(row, stats.count)

    def _step(self, batch: Shards, lr: float, update: bool) -> StepStats:
        with np.errstate(all="ignore"):  # a diverging run is the core's to stop, without NumPy's warnings
            return self._train_step(batch, lr, update)

    def _train_step(self, batch: Shards, lr: float, update: bool) -> StepStats:
        x, y = self._whole(batch)
        spec, opt = self.spec, self.setup.optimizer
        # lr 0: the reference's step then only moves the running statistics; the optimizer below moves the weights
        new, loss, correct = reference.train_step(spec, self.states[0], x, y, 0.0, batch.sizes,
                                                  self.batchnorm, self.dtype, self._masks(batch))
        grads = self.gradients(batch)
        if self._held is not None:
            grads = {name: self._held[name] + g for name, g in grads.items()}
        self._held = None if update else grads
        if update:
            params = {name: self.states[0][name] for name in spec.trainable()}
            decay = opt.weight_decay if self.fault == "decoupled-sgd-decay" and opt.name == "sgd" else 0.0
            if decay:
                opt = optim.Optimizer(momentum=opt.momentum, nesterov=opt.nesterov)
                params = {name: w * (1 - self.dtype(lr) * decay) for name, w in params.items()}
            moved, self.opt_state = optim.update(opt, params, grads, self.opt_state, self.dtype(lr))
            new.update(moved)
        updated = self.states[:1] if self.fault == "skip-broadcast" else self.states
        for replica in updated:
            replica.update({name: value.copy() for name, value in new.items()})
        return StepStats(loss, correct, batch.total)

    def optimizer_state(self) -> State:
        return {name: np.array(value) for name, value in self.opt_state.items()}

    def load_optimizer_state(self, state: State) -> None:
        optim.check_state(self.setup.optimizer, self.setup.spec, state)
        self.opt_state = {name: np.array(state[name], np.int64 if name == optim.STEP else self.dtype)
                          for name in self.setup.optimizer.state_names(self.setup.spec)}

    def _logits(self, batch: Shards) -> np.ndarray:
        return reference.predict(self.spec, self.states[0], np.concatenate(batch.x), self.dtype)

    def predict(self, batch: Shards) -> np.ndarray:
        logits = self._logits(batch)
        if self.fault == "softmax-predict":
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        return logits

    def evaluate(self, batch: Shards) -> StepStats:
        x, y = self._whole(batch)
        logits = self._logits(batch)
        if self.fault == "drop-a-sample" and len(x) > 1:
            x, y, logits = x[:-1], y[:-1], logits[:-1]
        loss, correct, _ = reference.layers.softmax_cross_entropy(logits, y.astype(np.int64), len(x))
        return StepStats(loss, correct, len(x) + (self.fault == "count-twice" and len(x) > 1))

    def state(self) -> State:
        return self.replica_states()[0]

    def replica_states(self) -> list[State]:
        return [{name: value.copy() for name, value in replica.items()} for replica in self.states]

    def load_state(self, state: State) -> None:
        self.setup.spec.check(state)
        self.states = [{p.name: np.array(state[p.name], self.dtype) for p in self.setup.spec.params()}
                       for _ in self.setup.devices]


#: what ``registered`` installs when asked for nothing else: the fake engine as ``fake``
FAKE = {"fake": "multidev.testing.fake:FakeEngine"}


def registered(folder: str | Path, engines: Mapping[str, str] = FAKE,
               env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """An environment (``env``, or this process's) whose Python processes find ``engines`` by entry point.

    ``engines``: name -> ``module:attribute`` of the engine's factory. ``folder`` gets a distribution's
    metadata that registers them, as an installed engine's package does, and goes first on PYTHONPATH
    (modules of the engines may lie there too); nothing outside ``folder`` changes. With it,
    ``multidev train --backend fake`` runs the fake engine in a child process, as a user runs a real one.
    """
    folder = Path(folder).resolve()
    dist = folder / "multidev_test_engines-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: multidev-test-engines\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\n" + "".join(f"{n} = {v}\n" for n, v in engines.items()))
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), out.get("PYTHONPATH")]))
    return out
