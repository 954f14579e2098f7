"""The table's networks written as hybridizable Gluon blocks (MXNet 1.9), NCHW, layer for layer torchvision's.

Not ``gluon.model_zoo.vision``: its ResNet-50 v1 strides the first 1x1 convolution and gives its convolutions
biases, its v2 is pre-activation, and its MobileNetV2 strides the stem, so none is multidev's network. Gluon's
BatchNorm defaults are torch's (momentum 0.9 of the running value, eps 1e-5); the attention is written out with
``batch_dot``, as Gluon has no attention layer of its own.
"""

from __future__ import annotations

import math
from typing import Any

from bench.frameworks import load_mxnet
from bench.peers.nets import CLASSES, EXPANSION, LN_EPS, MOBILENET_DROPOUT, MOBILENET_LAST, MOBILENET_STEM, Net

mx = load_mxnet()
nn = mx.gluon.nn


def conv(channels: int, kernel: int, stride: int = 1, groups: int = 1) -> Any:
    """A convolution without bias (BatchNorm follows), padded as torch pads it."""
    return nn.Conv2D(channels, kernel, stride, padding=kernel // 2, groups=groups, use_bias=False)


class Bottleneck(nn.HybridBlock):
    """torchvision's ResNet-50 block: 1x1, 3x3 (the stride), 1x1 to 4x the width; a 1x1 projection with BatchNorm."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        out = EXPANSION * width
        self.body = nn.HybridSequential()
        self.body.add(conv(width, 1), nn.BatchNorm(), nn.Activation("relu"),
                      conv(width, 3, stride), nn.BatchNorm(), nn.Activation("relu"), conv(out, 1), nn.BatchNorm())
        self.projection = None
        if stride != 1 or cin != out:
            self.projection = nn.HybridSequential()
            self.projection.add(conv(out, 1, stride), nn.BatchNorm())

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        shortcut = self.projection(x) if self.projection is not None else x
        return F.relu(self.body(x) + shortcut)


def resnet50(net: Net) -> Any:
    """A 7x7 stem at stride 2 and a 3x3 max pooling, four bottleneck stages, global mean, the classifier."""
    model = nn.HybridSequential()
    model.add(conv(64, 7, 2), nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
    cin = 64
    for width, count, stride in net.resnet_stages():
        for i in range(count):
            model.add(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = EXPANSION * width
    model.add(nn.GlobalAvgPool2D(), nn.Dense(CLASSES))
    return model


class ReLU6(nn.HybridBlock):
    """torch's ``ReLU6``: Gluon's ``Activation`` has no such kind."""

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.clip(x, 0.0, 6.0)


class InvertedResidual(nn.HybridBlock):
    """MobileNetV2's block: 1x1 expansion (none at expansion 1), 3x3 depthwise, 1x1 projection; the input added
    where the shape holds."""

    def __init__(self, cin: int, expansion: int, cout: int, stride: int) -> None:
        super().__init__()
        wide, self.adds = cin * expansion, stride == 1 and cin == cout
        self.body = nn.HybridSequential()
        if expansion != 1:
            self.body.add(conv(wide, 1), nn.BatchNorm(), ReLU6())
        self.body.add(conv(wide, 3, stride, groups=wide), nn.BatchNorm(), ReLU6(), conv(cout, 1), nn.BatchNorm())

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return x + self.body(x) if self.adds else self.body(x)


def mobilenet_v2(net: Net) -> Any:
    """The stem, the inverted residual blocks, a 1x1 convolution to 1280, global mean, Dropout, the classifier."""
    width, stride = MOBILENET_STEM
    model = nn.HybridSequential()
    model.add(conv(width, 3, stride), nn.BatchNorm(), ReLU6())
    for block in net.mobilenet_blocks():
        model.add(InvertedResidual(*block))
    model.add(conv(MOBILENET_LAST, 1), nn.BatchNorm(), ReLU6(), nn.GlobalAvgPool2D(), nn.Dropout(MOBILENET_DROPOUT),
              nn.Dense(CLASSES))
    return model


class Attention(nn.HybridBlock):
    """torch's ``nn.MultiheadAttention`` on a batch of sequences (N, L, D): one projection to queries, keys and
    values, softmax(q k^T / sqrt(d)) v per head, the heads joined and projected."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, 1.0 / math.sqrt(dim // heads)
        self.qkv = nn.Dense(3 * dim, flatten=False, in_units=dim)
        self.out = nn.Dense(dim, flatten=False, in_units=dim)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        qkv = F.transpose(F.reshape(self.qkv(x), (0, 0, 3, self.heads, -1)), (2, 0, 3, 1, 4))  # (3, N, H, L, d)
        q, k, v = (F.reshape(part, (-3, 0, 0)) for part in F.split(qkv, 3, axis=0, squeeze_axis=True))
        weights = F.softmax(F.batch_dot(q, k, transpose_b=True) * self.scale, axis=-1)
        heads = F.reshape(F.batch_dot(weights, v), (-4, -1, self.heads, 0, 0))  # (N, H, L, d)
        return self.out(F.reshape(F.transpose(heads, (0, 2, 1, 3)), (0, 0, -3)))


class EncoderBlock(nn.HybridBlock):
    """Pre-norm attention and a GELU MLP, each added to its input (torchvision's ``EncoderBlock``, no dropout)."""

    def __init__(self, net: Net) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(epsilon=LN_EPS), nn.LayerNorm(epsilon=LN_EPS)
        self.attention = Attention(net.dim, net.heads)
        self.mlp = nn.HybridSequential()
        self.mlp.add(nn.Dense(net.mlp, flatten=False), nn.GELU(), nn.Dense(net.dim, flatten=False))

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.HybridBlock):
    """Patches embedded by a strided convolution, a class token, a learned position embedding, the blocks, a last
    LayerNorm, the class token's state to the classifier."""

    def __init__(self, net: Net) -> None:
        super().__init__()
        self.patches = nn.Conv2D(net.dim, net.patch, net.patch)
        self.token = self.params.get("token", shape=(1, 1, net.dim), init=mx.init.Zero())
        self.position = self.params.get("position", shape=(1, net.tokens, net.dim), init=mx.init.Normal(0.02))
        self.blocks = nn.HybridSequential()
        for _ in range(net.depth):
            self.blocks.add(EncoderBlock(net))
        self.norm, self.head = nn.LayerNorm(epsilon=LN_EPS), nn.Dense(CLASSES)

    def hybrid_forward(self, F: Any, x: Any, token: Any, position: Any) -> Any:
        x = F.transpose(F.reshape(self.patches(x), (0, 0, -1)), (0, 2, 1))  # (N, L, D)
        x = F.concat(F.broadcast_like(token, x, lhs_axes=(0,), rhs_axes=(0,)), x, dim=1)
        x = self.blocks(F.broadcast_add(x, position))
        return self.head(F.slice_axis(self.norm(x), axis=1, begin=0, end=1))


def build(net: Net) -> Any:
    """The Gluon block of ``net``, not yet initialised."""
    return {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "vit": ViT}[net.name](net)
