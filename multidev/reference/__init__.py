"""The models written out in NumPy, forward and backward, in any float dtype.

This is the contract's arithmetic with nothing framework-specific in it: the
NumPy example engine runs it in float32, and the conformance kit runs it in
float64 to get the *truth* that every engine's float32 answers are measured
against (docs/contract.md, "Tolerances"). Devices are simulated in lockstep
(``network.Run``), so local and sync BatchNorm and uneven shards follow the
contract exactly.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from multidev.nn.layers import HardSigmoid, HardSwish, LeakyReLU, ReLU, ReLU6
from multidev.reference import layers
from multidev.reference.network import Network, Run, build
from multidev.rules.batchnorm import running_statistic
from multidev.rules.models import ModelSpec, State
from multidev.rules.split import split

Masks = Optional[Mapping[str, np.ndarray]]  # Dropout node -> the whole batch's multipliers (B, *shape)

__all__ = ["Network", "Run", "backward", "build", "gradients", "layers", "predict", "recipe_steps", "relu_inputs",
           "sgd_step", "train_step"]


def backward(model: Network, run: Run, xs: Sequence[np.ndarray], ys: Sequence[np.ndarray],
             total: int) -> tuple[float, int, State]:
    """(loss sum, correct, summed gradient) of the mean loss over ``total`` samples; one shard per run device.

    Each shard's loss is its samples' sum over the *whole* B (weight n_i / B),
    so the plain sum of the devices' gradients is the whole-batch gradient.
    """
    logits = model.forward(run, list(xs))
    losses = [layers.softmax_cross_entropy(z, y, total) for z, y in zip(logits, ys)]
    model.backward(run, [grad for _, _, grad in losses])
    summed = {name: sum(g[name] for g in run.grads) for name in run.grads[0]}
    return sum(loss for loss, _, _ in losses), sum(c for _, c, _ in losses), summed


def _shards(x: np.ndarray, y: np.ndarray, sizes: Optional[Sequence[int]], dtype) -> tuple[list, list]:
    sizes = _active(x, sizes)
    xs = [np.asarray(part, dtype) for part in split(np.asarray(x), sizes)]
    return xs, split(np.asarray(y, np.int64), sizes)


def _active(x: np.ndarray, sizes: Optional[Sequence[int]]) -> list[int]:
    return [len(x)] if sizes is None else [s for s in sizes if s > 0]


def _masks(masks: Masks, x: np.ndarray, sizes: Optional[Sequence[int]], dtype) -> Optional[list[dict]]:
    """Each active device's rows of the whole batch's Dropout multipliers."""
    if masks is None:
        return None
    active = _active(x, sizes)
    parts = {name: split(np.asarray(m, dtype), active) for name, m in masks.items()}
    return [{name: p[d] for name, p in parts.items()} for d in range(len(active))]


def _copies(spec: ModelSpec, state: State, k: int, dtype) -> list[State]:
    return [{p.name: np.array(state[p.name], dtype) for p in spec.params()} for _ in range(k)]


def gradients(spec: ModelSpec, state: State, x: np.ndarray, y: np.ndarray, sizes: Optional[Sequence[int]] = None,
              batchnorm: str = "local", dtype=np.float64, masks: Masks = None) -> State:
    """The contract's aggregated gradient for a batch cut by ``sizes`` (one device when None), in ``dtype``.

    ``masks``: the whole batch's Dropout multipliers by node, for a model with Dropout.
    """
    xs, ys = _shards(x, y, sizes, dtype)
    run = Run(_copies(spec, state, len(xs), dtype), train=True, sync=batchnorm == "sync", update_stats=False,
              masks=_masks(masks, x, sizes, dtype))
    return backward(build(spec), run, xs, ys, len(x))[2]


def sgd_step(spec: ModelSpec, state: State, x: np.ndarray, y: np.ndarray, lr: float,
             sizes: Optional[Sequence[int]] = None, batchnorm: str = "local", dtype=np.float64,
             masks: Masks = None) -> State:
    """The state after one plain SGD step of the contract, running statistics included, in ``dtype``."""
    return train_step(spec, state, x, y, lr, sizes, batchnorm, dtype, masks)[0]


def train_step(spec: ModelSpec, state: State, x: np.ndarray, y: np.ndarray, lr: float,
               sizes: Optional[Sequence[int]] = None, batchnorm: str = "local",
               dtype=np.float64, masks: Masks = None) -> tuple[State, float, int]:
    """(new state, loss sum, correct) of one SGD step: :func:`sgd_step` with the step's training-mode sums."""
    xs, ys = _shards(x, y, sizes, dtype)
    replicas = _copies(spec, state, len(xs), dtype)
    run = Run(replicas, train=True, sync=batchnorm == "sync", update_stats=True, masks=_masks(masks, x, sizes, dtype))
    loss, correct, grads = backward(build(spec), run, xs, ys, len(x))
    new = {name: replicas[0][name] - dtype(lr) * grads[name] for name in spec.trainable()}
    for name in spec.statistics():  # every shard here has data: all devices are active
        new[name] = running_statistic([r[name] for r in replicas], range(len(replicas)), batchnorm == "sync")
    return new, loss, correct


def predict(spec: ModelSpec, state: State, x: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Inference-mode logits (running statistics), in ``dtype``."""
    run = Run(_copies(spec, state, 1, dtype), train=False)
    return build(spec).forward(run, [np.asarray(x, dtype)])[0]


#: where each piecewise activation's gradient jumps
_KINKS = {ReLU: (0.0,), LeakyReLU: (0.0,), ReLU6: (0.0, 6.0), HardSigmoid: (-3.0, 3.0), HardSwish: (-3.0, 3.0)}


def relu_inputs(spec: ModelSpec, state: State, x: np.ndarray, sizes: Optional[Sequence[int]] = None,
                batchnorm: str = "local", dtype=np.float64, masks: Masks = None) -> list[np.ndarray]:
    """What every ReLU receives in a training-mode forward pass (one array per ReLU and device), less the kink:
    ReLU6, LeakyReLU, HardSigmoid and HardSwish give one array per kink of theirs, their inputs less its place.

    A gradient is not continuous at a ReLU's kink: where an input sits closer
    to 0 than float32 rounding reaches, float32 runs land on either side and
    their gradients differ by far more than rounding. The conformance kit uses
    these values to judge gradients only on cases that stay clear of kinks.
    """
    model, seen = build(spec), []

    def watch(layer, values):
        for kink in _KINKS.get(type(layer), ()):
            seen.extend(np.array(v, np.float64) - kink for v in values)
    model.watch = watch
    xs, _ = _shards(x, np.zeros(len(x)), sizes, dtype)
    model.forward(Run(_copies(spec, state, len(xs), dtype), train=True, sync=batchnorm == "sync",
                      update_stats=False, masks=_masks(masks, x, sizes, dtype)), xs)
    return seen


def recipe_steps(spec: ModelSpec, state: State, optimizer, steps: Sequence[tuple[np.ndarray, np.ndarray]],
                 rates: Sequence[float], sizes: Optional[Sequence[int]] = None, batchnorm: str = "local",
                 dtype=np.float64, opt_state: Optional[State] = None) -> tuple[State, State]:
    """(state, optimizer state) after one update of ``optimizer`` per (x, y) in ``steps``, at ``rates``.

    The contract's whole update: the aggregated gradient (as :func:`gradients`),
    running statistics moved as in :func:`train_step`, weights moved by
    ``multidev.rules.optimizers.update``.
    """
    from multidev.rules import optimizers as optim

    state = {p.name: np.array(state[p.name], dtype) for p in spec.params()}
    opt_state = optimizer.init_state(spec, dtype) if opt_state is None else dict(opt_state)
    for (x, y), lr in zip(steps, rates):
        moved, _, _ = train_step(spec, state, x, y, 0.0, sizes, batchnorm, dtype)  # statistics only
        grads = gradients(spec, state, x, y, sizes, batchnorm, dtype)
        params, opt_state = optim.update(optimizer, {n: state[n] for n in spec.trainable()}, grads, opt_state,
                                         dtype(lr))
        state = {**moved, **params}
    return state, opt_state
