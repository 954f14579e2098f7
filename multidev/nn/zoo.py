"""The zoo: networks written in the model language, each leaving its class count to the data.

``resnet18`` and ``lenet`` are the book's networks with the canonical names
checkpoints have always used; ``mlp`` is for feature vectors (images are
flattened); ``convnet`` is a small VGG-style network with max pooling and
dropout; ``mobilenet_v2`` is today's depthwise network and ``vit`` a small
Vision Transformer, both sized for 28-32 px images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from multidev.nn.graph import Residual, Sequential
from multidev.nn.layers import (GELU, AvgPool2d, BatchNorm, ClassToken, Conv2d, Dense, DropPath, Dropout, Flatten,
                                GlobalAvgPool, LayerNorm, MaxPool2d, MultiHeadAttention, PositionEmbedding, ReLU, ReLU6,
                                Reshape, Slice, Transpose)


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


#: MobileNetV2's inverted residual stages: (expansion, channels, blocks, first stride), torchvision's, with the
#: first two strides 1 for 28-32 px images (a 224 px network would leave them 1x1 before its last stage)
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))


def _inverted_residual(cin: int, expansion: int, cout: int, stride: int, name: str) -> Sequential | Residual:
    """1x1 expansion, a 3x3 depthwise convolution, a 1x1 projection; the input added where the shape holds."""
    wide = cin * expansion
    expand = (Conv2d(wide, 1, bias=False, name="expand"), BatchNorm(name="bn1"), ReLU6()) if expansion != 1 else ()
    body = (*expand, Conv2d(wide, 3, stride=stride, padding=1, groups=wide, bias=False, name="depthwise"),
            BatchNorm(name="bn2"), ReLU6(), Conv2d(cout, 1, bias=False, name="project"), BatchNorm(name="bn3"))
    return Residual(*body, name=name) if stride == 1 and cin == cout else Sequential(*body, name=name)


def mobilenet_v2() -> Sequential:
    """MobileNetV2 (Sandler et al. 2018) as torchvision builds it, its stem and first stage at stride 1."""
    blocks, cin = [], 32
    for expansion, cout, count, stride in MOBILENET_V2_STAGES:
        for i in range(count):
            blocks.append(_inverted_residual(cin, expansion, cout, stride if i == 0 else 1, f"block{len(blocks) + 1}"))
            cin = cout
    stem = Sequential(Conv2d(32, 3, padding=1, bias=False, name="conv"), BatchNorm(name="bn"), ReLU6(), name="stem")
    head = Sequential(Conv2d(1280, 1, bias=False, name="conv"), BatchNorm(name="bn"), ReLU6(), name="last")
    return Sequential(stem, *blocks, head, GlobalAvgPool(), Dropout(0.2), Dense(name="fc"))


def vit(patch: int = 4, dim: int = 64, depth: int = 4, heads: int = 4, mlp: int = 128,
        drop_path: float = 0.0) -> Sequential:
    """A Vision Transformer (Dosovitskiy et al. 2021) for small images, as torchvision's: patches embedded by a
    strided convolution, a class token, a learned position embedding, ``depth`` pre-norm blocks of attention and a
    GELU MLP (LayerNorm eps 1e-6), the class token's final state to the classifier. ``drop_path``: stochastic
    depth's rate at the last block, rising linearly from 0 at the first."""
    blocks = []
    for i in range(1, depth + 1):
        rate = drop_path * (i - 1) / max(depth - 1, 1)
        skip = (DropPath(rate),) if rate else ()
        attention = Residual(LayerNorm(eps=1e-6, last=1, name="norm"), MultiHeadAttention(heads, name="attn"),
                             *skip, name="attention")
        feed = Residual(LayerNorm(eps=1e-6, last=1, name="norm"), Dense(mlp, name="fc1"), GELU(),
                        Dense(dim, name="fc2"), *skip, name="mlp")
        blocks.append(Sequential(attention, feed, name=f"block{i}"))
    embed = Sequential(Conv2d(dim, patch, stride=patch, name="patch"), Reshape((dim, -1)), Transpose((1, 0)),
                       ClassToken(name="cls"), PositionEmbedding(name="pos"), name="embed")
    return Sequential(embed, *blocks, LayerNorm(eps=1e-6, last=1, name="norm"), Slice(0, 0, 1), Flatten(),
                      Dense(name="head"))


ZOO: dict[str, Callable[[], Sequential]] = {"resnet18": resnet18, "lenet": lenet, "mlp": mlp, "convnet": convnet,
                                            "mobilenet_v2": mobilenet_v2, "vit": vit}
