"""The table's networks written in Flax (linen) as a JAX user writes them, channels last, layer for layer
torchvision's: explicit paddings as torch's (not "SAME", which pads a strided convolution on one side only),
BatchNorm momentum 0.9 and eps 1e-5, exact (erf) GELU, full float32 arithmetic as the engine's float32."""

from __future__ import annotations

from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bench.peers.nets import (BN_EPS, BN_MOMENTUM, CLASSES, EXPANSION, LN_EPS, MOBILENET_DROPOUT, MOBILENET_LAST,
                              MOBILENET_STEM, Net)

HIGHEST = jax.lax.Precision.HIGHEST
conv = partial(nn.Conv, use_bias=False, precision=HIGHEST)
dense = partial(nn.Dense, precision=HIGHEST)


def norm(train: bool) -> nn.BatchNorm:
    """torch's BatchNorm: Flax's default momentum 0.99 would be another running average."""
    return nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPS)


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 block: 1x1, 3x3 (the stride), 1x1 to 4x the width; a 1x1 projection with BatchNorm."""

    width: int
    stride: int

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        out = EXPANSION * self.width
        y = nn.relu(norm(train)(conv(self.width, (1, 1), padding=0)(x)))
        y = nn.relu(norm(train)(conv(self.width, (3, 3), self.stride, padding=1)(y)))
        y = norm(train)(conv(out, (1, 1), padding=0)(y))
        if self.stride != 1 or x.shape[-1] != out:
            x = norm(train)(conv(out, (1, 1), self.stride, padding=0)(x))
        return nn.relu(y + x)


class ResNet50(nn.Module):
    """A 7x7 stem at stride 2 and a 3x3 max pooling, four bottleneck stages, global mean, the classifier."""

    net: Net

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        x = nn.relu(norm(train)(conv(64, (7, 7), 2, padding=3)(x)))
        x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        for width, count, stride in self.net.resnet_stages():
            for i in range(count):
                x = Bottleneck(width, stride if i == 0 else 1)(x, train)
        return dense(CLASSES)(x.mean(axis=(1, 2)))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion (none at expansion 1), 3x3 depthwise, 1x1 projection; the input added
    where the shape holds."""

    cin: int
    expansion: int
    cout: int
    stride: int

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        wide = self.cin * self.expansion
        y = x
        if self.expansion != 1:
            y = nn.relu6(norm(train)(conv(wide, (1, 1), padding=0)(y)))
        y = nn.relu6(norm(train)(conv(wide, (3, 3), self.stride, padding=1, feature_group_count=wide)(y)))
        y = norm(train)(conv(self.cout, (1, 1), padding=0)(y))
        return x + y if self.stride == 1 and self.cin == self.cout else y


class MobileNetV2(nn.Module):
    """The stem, the inverted residual blocks, a 1x1 convolution to 1280, global mean, Dropout, the classifier."""

    net: Net

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        width, stride = MOBILENET_STEM
        x = nn.relu6(norm(train)(conv(width, (3, 3), stride, padding=1)(x)))
        for block in self.net.mobilenet_blocks():
            x = InvertedResidual(*block)(x, train)
        x = nn.relu6(norm(train)(conv(MOBILENET_LAST, (1, 1), padding=0)(x)))
        x = nn.Dropout(MOBILENET_DROPOUT, deterministic=not train)(x.mean(axis=(1, 2)))
        return dense(CLASSES)(x)


class EncoderBlock(nn.Module):
    """Pre-norm attention and a GELU MLP, each added to its input (torchvision's ``EncoderBlock``, no dropout)."""

    dim: int
    heads: int
    mlp: int

    @nn.compact
    def __call__(self, x: Any) -> Any:
        y = nn.LayerNorm(epsilon=LN_EPS)(x)
        x = x + nn.MultiHeadDotProductAttention(self.heads, qkv_features=self.dim, precision=HIGHEST)(y, y)
        y = nn.LayerNorm(epsilon=LN_EPS)(x)
        return x + dense(self.dim)(nn.gelu(dense(self.mlp)(y), approximate=False))


class ViT(nn.Module):
    """Patches embedded by a strided convolution, a class token, a learned position embedding, the blocks, a last
    LayerNorm, the class token's state to the classifier."""

    net: Net

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        net = self.net
        x = nn.Conv(net.dim, (net.patch, net.patch), net.patch, padding=0, precision=HIGHEST)(x)
        x = x.reshape(len(x), -1, net.dim)
        token = self.param("cls", nn.initializers.zeros, (1, 1, net.dim))
        x = jnp.concatenate([jnp.broadcast_to(token, (len(x), 1, net.dim)), x], axis=1)
        x = x + self.param("pos", nn.initializers.normal(0.02), (1, net.tokens, net.dim))
        for _ in range(net.depth):
            x = EncoderBlock(net.dim, net.heads, net.mlp)(x)
        return dense(CLASSES)(nn.LayerNorm(epsilon=LN_EPS)(x)[:, 0])


def build(net: Net) -> nn.Module:
    """The Flax module of ``net``; call it as ``model.apply(variables, x, train=...)``."""
    return {"resnet50": ResNet50, "mobilenet_v2": MobileNetV2, "vit": ViT}[net.name](net)
