"""The book's small-image ResNet-18 and LeNet in Flax, with the core's canonical names.

Module paths equal the canonical names (``stage2.block1.conv1``), so
:mod:`.layout` only renames leaves and reorders axes. Images arrive NCHW (the
canonical layout) and are turned NHWC inside, where XLA's convolutions want
them; LeNet turns back to NCHW before flattening so its dense weight keeps
the canonical C, H, W feature order.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from multidev.engine import Block, ModelSpec, resnet18_blocks

from .batchnorm import BatchNorm
from .conv import conv_general_dilated

#: Full float32 everywhere: the engines promise the same answers, and TF32 on GPUs would break the 1e-3 tolerance.
PRECISION = lax.Precision.HIGHEST


def conv(features: int, size: int, name: str, cpu: bool, stride: int = 1, padding: int = 0,
         bias: bool = True) -> nn.Conv:
    """A square convolution; on the CPU, tiny outputs go through a matrix product (see conv.py)."""
    return nn.Conv(features, (size, size), strides=(stride, stride), padding=((padding, padding),) * 2,
                   use_bias=bias, precision=PRECISION, name=name,
                   conv_general_dilated=conv_general_dilated if cpu else None)


class ConvBN(nn.Module):
    """The stem: 3x3 convolution, BatchNorm, ReLU."""

    features: int
    sync: bool
    cpu: bool

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
        x = conv(self.features, 3, "conv", self.cpu, padding=1, bias=False)(x)
        return nn.relu(BatchNorm(self.sync, name="bn")(x, mask))


class Residual(nn.Module):
    block: Block
    sync: bool
    cpu: bool

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
        b = self.block
        y = conv(b.out_channels, 3, "conv1", self.cpu, stride=b.stride, padding=1, bias=False)(x)
        y = nn.relu(BatchNorm(self.sync, name="bn1")(y, mask))
        y = conv(b.out_channels, 3, "conv2", self.cpu, padding=1, bias=False)(y)
        y = BatchNorm(self.sync, name="bn2")(y, mask)
        skip = conv(b.out_channels, 1, "proj", self.cpu, stride=b.stride)(x) if b.projection else x
        return nn.relu(y + skip)


class Stage(nn.Module):
    """One stage's blocks, so that the parameter paths read ``stageN.blockM``."""

    blocks: tuple[Block, ...]
    sync: bool
    cpu: bool

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
        for blk in self.blocks:
            x = Residual(blk, self.sync, self.cpu, name=blk.prefix.split(".")[1])(x, mask)
        return x


class ResNet18(nn.Module):
    num_classes: int
    sync: bool = False
    cpu: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None) -> jax.Array:
        x = ConvBN(64, self.sync, self.cpu, name="stem")(jnp.transpose(x, (0, 2, 3, 1)), mask)
        stages: dict[str, list[Block]] = {}
        for blk in resnet18_blocks():
            stages.setdefault(blk.prefix.split(".")[0], []).append(blk)
        for name, blocks in stages.items():
            x = Stage(tuple(blocks), self.sync, self.cpu, name=name)(x, mask)
        return nn.Dense(self.num_classes, precision=PRECISION, name="fc")(x.mean(axis=(1, 2)))


class LeNet(nn.Module):
    num_classes: int
    sync: bool = False  # no BatchNorm: accepted for a uniform signature
    cpu: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None) -> jax.Array:
        x = jnp.transpose(x, (0, 2, 3, 1))
        x = nn.avg_pool(nn.relu(conv(20, 3, "conv1", self.cpu)(x)), (2, 2), strides=(2, 2))
        x = nn.avg_pool(nn.relu(conv(50, 5, "conv2", self.cpu)(x)), (2, 2), strides=(2, 2))
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)  # canonical C, H, W order
        x = nn.relu(nn.Dense(128, precision=PRECISION, name="fc1")(x))
        return nn.Dense(self.num_classes, precision=PRECISION, name="fc2")(x)


def build(spec: ModelSpec, sync: bool, cpu: bool = False) -> nn.Module:
    """The network for ``spec``; ``cpu`` picks the CPU-friendly convolution for tiny outputs."""
    cls = ResNet18 if spec.name == "resnet18" else LeNet
    return cls(spec.num_classes, sync, cpu)
