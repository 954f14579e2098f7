"""The zoo: networks written in the model language, each leaving its class count to the data.

``resnet18`` and ``lenet`` are the book's networks with the canonical names
checkpoints have always used; ``mlp`` is for feature vectors (images are
flattened); ``convnet`` is a small VGG-style network with max pooling and
dropout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from multidev.nn.graph import Residual, Sequential
from multidev.nn.layers import AvgPool2d, BatchNorm, Conv2d, Dense, Dropout, Flatten, GlobalAvgPool, MaxPool2d, ReLU


@dataclass(frozen=True)
class Block:
    """One residual block of ResNet-18: where it sits and what it does."""

    prefix: str
    in_channels: int
    out_channels: int
    stride: int

    @property
    def projection(self) -> bool:
        return self.stride != 1 or self.in_channels != self.out_channels


RESNET18_WIDTHS = (64, 128, 256, 512)


def resnet18_blocks() -> list[Block]:
    """Four stages of two blocks; stages 2-4 open with stride 2 and a 1x1 projection."""
    blocks, channels = [], 64
    for s, width in enumerate(RESNET18_WIDTHS, start=1):
        for b in (1, 2):
            stride = 2 if (s > 1 and b == 1) else 1
            blocks.append(Block(f"stage{s}.block{b}", channels, width, stride))
            channels = width
    return blocks


def _conv_bn(width: int, stride: int = 1) -> tuple:
    # convolutions followed by BatchNorm carry no bias: BatchNorm's shift makes it redundant
    return Conv2d(width, 3, stride=stride, padding=1, bias=False), BatchNorm()


def resnet18() -> Sequential:
    """The book's small-image ResNet-18: a 3x3 stem, no max pooling, four stages of two residual blocks."""
    blocks = []
    for b in resnet18_blocks():
        # as in the book, the 1x1 projection has a bias and no BatchNorm
        shortcut = Conv2d(b.out_channels, 1, stride=b.stride, name="proj") if b.projection else None
        blocks += [Residual(*_conv_bn(b.out_channels, b.stride), ReLU(), *_conv_bn(b.out_channels),
                            shortcut=shortcut, name=b.prefix), ReLU()]
    stem = Sequential(Conv2d(64, 3, padding=1, bias=False, name="conv"), BatchNorm(name="bn"), ReLU(), name="stem")
    return Sequential(stem, *blocks, GlobalAvgPool(), Dense(name="fc"))


def lenet() -> Sequential:
    """The book's from-scratch LeNet: unpadded convolutions with bias, average pooling (images of 14x14 or more)."""
    return Sequential(Conv2d(20, 3), ReLU(), AvgPool2d(2), Conv2d(50, 5), ReLU(), AvgPool2d(2), Flatten(),
                      Dense(128), ReLU(), Dense())


def mlp() -> Sequential:
    """Two hidden layers of 256 for feature vectors (images are flattened first)."""
    return Sequential(Flatten(), Dense(256), ReLU(), Dense(256), ReLU(), Dense())


def convnet() -> Sequential:
    """Two 3x3 convolution pairs, each closed by 2x2 max pooling, then dropout before the classifier."""
    return Sequential(*_conv_bn(32), ReLU(), *_conv_bn(32), ReLU(), MaxPool2d(2),
                      *_conv_bn(64), ReLU(), *_conv_bn(64), ReLU(), MaxPool2d(2),
                      GlobalAvgPool(), Dropout(0.25), Dense())


ZOO: dict[str, Callable[[], Sequential]] = {"resnet18": resnet18, "lenet": lenet, "mlp": mlp, "convnet": convnet}
