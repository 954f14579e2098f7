"""The book's networks in plain Gluon (d2l "Residual" and "resnet_block"), and the book's concise loop over them:
what ``bench.bench_mxnet`` times the engine against, and ``bench.bench_engines``' first step of the framework
alone. MXNet loads as the engine loads it (``bench.frameworks.load_mxnet``)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from bench.frameworks import load_mxnet
from bench.peers.gluon_loop import sharded_step

mx = load_mxnet()
nn = mx.gluon.nn


class Residual(nn.HybridBlock):
    """The book's residual block: two 3x3 convolutions, a 1x1 projection where the shape changes."""

    def __init__(self, channels: int, use_1x1conv: bool = False, strides: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2D(channels, kernel_size=3, padding=1, strides=strides, use_bias=False)
        self.conv2 = nn.Conv2D(channels, kernel_size=3, padding=1, use_bias=False)
        self.conv3 = nn.Conv2D(channels, kernel_size=1, strides=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm()
        self.bn2 = nn.BatchNorm()

    def hybrid_forward(self, F, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def resnet18(num_classes: int) -> nn.HybridSequential:
    """The book's small-image ResNet-18: a 3x3 stem, no max pooling, four stages of two residual blocks."""
    def block(channels: int, first_block: bool = False) -> nn.HybridSequential:
        blk = nn.HybridSequential()
        for i in range(2):
            down = i == 0 and not first_block
            blk.add(Residual(channels, use_1x1conv=down, strides=2 if down else 1))
        return blk

    net = nn.HybridSequential()
    net.add(nn.Conv2D(64, kernel_size=3, strides=1, padding=1, use_bias=False), nn.BatchNorm(),
            nn.Activation("relu"))
    net.add(block(64, first_block=True), block(128), block(256), block(512))
    net.add(nn.GlobalAvgPool2D(), nn.Dense(num_classes))
    return net


def mlp(num_classes: int) -> nn.HybridSequential:
    """multidev's ``mlp`` (a smoke run's): two hidden layers of 256 (Gluon's Dense flattens the image)."""
    net = nn.HybridSequential()
    net.add(nn.Dense(256, activation="relu"), nn.Dense(256, activation="relu"), nn.Dense(num_classes))
    return net


def book_step(model: str, contexts: list, x: np.ndarray, y: np.ndarray, lr: float) -> Callable[[], float]:
    """One step of the book's ``model`` (resnet18, or mlp for a smoke run) on ``contexts``, the loss read back."""
    net = resnet18(10) if model == "resnet18" else mlp(10)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize(static_alloc=True)
    return sharded_step(mx, net, contexts, x, y, lr, momentum=0.0)
