"""The book's small-image ResNet-18 and LeNet, with the core's canonical names.

The replicas run in lockstep: each layer runs on every device's shard before
the next layer starts, so an activation is a list with one array per device.
That is how SPMD programs run on real devices, and it gives the one layer that
exchanges data between devices (sync BatchNorm) every device's values at the
moment it needs them, without threads. Each device computes with its own copy
of the parameters (``Run.params``), never device 0's.

Parameters live in plain dicts under their canonical names
(``multidev.ModelSpec.params()``), so the state, a checkpoint and the
gradients are the same dict shape with no renaming.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from multidev.reference import layers
from multidev.reference.batchnorm import BatchNorm
from multidev.rules.models import ModelSpec, State, resnet18_blocks


@dataclass
class Run:
    """One forward (and backward) pass over the active devices: device i uses ``params[i]``."""

    params: list[State]
    train: bool
    sync: bool = False           # BatchNorm over the whole minibatch
    update_stats: bool = True    # BatchNorm running statistics (off when only gradients are asked for)
    grads: list[State] = field(init=False)  # device i's gradients, filled in by the backward pass

    def __post_init__(self) -> None:
        self.grads = [{} for _ in self.params]


class PerDevice:
    """A layer with no cross-device traffic: the same single-device function on every shard."""

    def forward(self, run: Run, xs: list[np.ndarray]) -> list[np.ndarray]:
        outs = [self.forward_one(p, x) for p, x in zip(run.params, xs)]
        self.saved = [cache for _, cache in outs]
        return [y for y, _ in outs]

    def backward(self, run: Run, dys: list[np.ndarray]) -> list[np.ndarray]:
        dxs = [self.backward_one(g, dy, cache) for g, dy, cache in zip(run.grads, dys, self.saved)]
        self.saved = []  # free the activations as soon as they are used
        return dxs


class Conv(PerDevice):
    def __init__(self, name: str, stride: int = 1, padding: int = 1, bias: bool = False) -> None:
        self.name, self.stride, self.padding, self.bias = name, stride, padding, bias

    def forward_one(self, p: State, x: np.ndarray):
        b = p[f"{self.name}.bias"] if self.bias else None
        return layers.conv2d(x, p[f"{self.name}.weight"], b, self.stride, self.padding)

    def backward_one(self, g: State, dy: np.ndarray, cache) -> np.ndarray:
        dx, g[f"{self.name}.weight"], db = layers.conv2d_backward(dy, cache)
        if self.bias:
            g[f"{self.name}.bias"] = db
        return dx


class Dense(PerDevice):
    def __init__(self, name: str) -> None:
        self.name = name

    def forward_one(self, p: State, x: np.ndarray):
        return layers.dense(x, p[f"{self.name}.weight"], p[f"{self.name}.bias"])

    def backward_one(self, g: State, dy: np.ndarray, cache) -> np.ndarray:
        dx, g[f"{self.name}.weight"], g[f"{self.name}.bias"] = layers.dense_backward(dy, cache)
        return dx


class Function(PerDevice):
    """A layer without parameters, from a forward and a backward function of ``layers``."""

    def __init__(self, forward, backward) -> None:
        self._forward, self._backward = forward, backward

    def forward_one(self, p: State, x: np.ndarray):
        return self._forward(x)

    def backward_one(self, g: State, dy: np.ndarray, cache) -> np.ndarray:
        return self._backward(dy, cache)


def ReLU() -> Function:
    return Function(layers.relu, layers.relu_backward)


def AvgPool2() -> Function:
    return Function(layers.avg_pool2, layers.avg_pool2_backward)


def GlobalAvgPool() -> Function:
    return Function(layers.global_avg_pool, layers.global_avg_pool_backward)


def Flatten() -> Function:  # C, H, W order: NCHW rows reshaped as they lie
    return Function(lambda x: (x.reshape(len(x), -1), x.shape), lambda dy, shape: dy.reshape(shape))


class Sequential:
    def __init__(self, *children) -> None:
        self.children = children

    def forward(self, run: Run, xs: list[np.ndarray]) -> list[np.ndarray]:
        for child in self.children:
            xs = child.forward(run, xs)
        return xs

    def backward(self, run: Run, dys: list[np.ndarray]) -> list[np.ndarray]:
        for child in reversed(self.children):
            dys = child.backward(run, dys)
        return dys


class Residual:
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the shortcut is x or a 1x1 projection with bias."""

    def __init__(self, prefix: str, stride: int, projection: bool) -> None:
        self.body = Sequential(Conv(f"{prefix}.conv1", stride), BatchNorm(f"{prefix}.bn1"), ReLU(),
                               Conv(f"{prefix}.conv2"), BatchNorm(f"{prefix}.bn2"))
        self.proj = Conv(f"{prefix}.proj", stride, padding=0, bias=True) if projection else None
        self.relu = ReLU()

    def forward(self, run: Run, xs: list[np.ndarray]) -> list[np.ndarray]:
        body = self.body.forward(run, xs)
        short = xs if self.proj is None else self.proj.forward(run, xs)
        return self.relu.forward(run, [a + b for a, b in zip(body, short)])

    def backward(self, run: Run, dys: list[np.ndarray]) -> list[np.ndarray]:
        dsum = self.relu.backward(run, dys)  # the sum feeds both branches: each gets the same gradient
        d_body = self.body.backward(run, dsum)
        d_short = dsum if self.proj is None else self.proj.backward(run, dsum)
        return [a + b for a, b in zip(d_body, d_short)]


def resnet18() -> Sequential:
    # 3x3 stem with stride 1 and no max-pooling: the small-image variant.
    blocks = [Residual(b.prefix, b.stride, b.projection) for b in resnet18_blocks()]
    return Sequential(Conv("stem.conv"), BatchNorm("stem.bn"), ReLU(), *blocks, GlobalAvgPool(), Dense("fc"))


def lenet() -> Sequential:
    # Unpadded convolutions with bias, average pooling: the book's from-scratch LeNet.
    return Sequential(Conv("conv1", padding=0, bias=True), ReLU(), AvgPool2(),
                      Conv("conv2", padding=0, bias=True), ReLU(), AvgPool2(),
                      Flatten(), Dense("fc1"), ReLU(), Dense("fc2"))


def build(spec: ModelSpec) -> Sequential:
    return resnet18() if spec.name == "resnet18" else lenet()
