"""The book's small-image ResNet-18 and LeNet in Flax, with the core's canonical names.

Module paths equal the canonical names (``stage2.block1.conv1``), so
:mod:`.layout` only renames leaves and reorders axes. Images arrive NCHW (the
canonical layout) and are turned NHWC inside, where XLA's convolutions want
them; LeNet turns back to NCHW before flattening so its dense weight keeps
the canonical C, H, W feature order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from multidev.engine import Block, ModelSpec, resnet18_blocks

from .batchnorm import BatchNorm
from .conv import conv_general_dilated

#: Full float32 everywhere: the engines promise the same answers, and TF32 on GPUs would break the 1e-3 tolerance.
PRECISION = lax.Precision.HIGHEST
#: TF32 matrix multiplies ("tensorfloat32" is HIGH), only where the user opts in on a GPU
TF32 = lax.Precision.HIGH


@dataclass(frozen=True)
class Compute:
    """How the network computes, apart from its parameters' dtype.

    ``dtype``: activations, convolutions and matrix products (None: the
    parameters' dtype; bfloat16 for precision bf16, the parameters staying
    float32). BatchNorm and the logits stay in the parameters' dtype.
    """

    cpu: bool = False
    dtype: Any = None
    precision: lax.Precision = PRECISION

    def logits(self, z: jax.Array) -> jax.Array:
        """Logits in float32 (bf16 keeps float32 parameters), so the loss and its sums never run in bfloat16."""
        return z if self.dtype is None else z.astype(jnp.float32)


def conv(features: int, size: int, name: str, compute: Compute, stride: int = 1, padding: int = 0,
         bias: bool = True) -> nn.Conv:
    """A square convolution; on the CPU, tiny outputs go through a matrix product (see conv.py)."""
    return nn.Conv(features, (size, size), strides=(stride, stride), padding=((padding, padding),) * 2,
                   use_bias=bias, dtype=compute.dtype, precision=compute.precision, name=name,
                   conv_general_dilated=conv_general_dilated if compute.cpu else None)


def dense(features: int, name: str, compute: Compute) -> nn.Dense:
    return nn.Dense(features, dtype=compute.dtype, precision=compute.precision, name=name)


class ConvBN(nn.Module):
    """The stem: 3x3 convolution, BatchNorm, ReLU."""

    features: int
    sync: bool
    compute: Compute

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
        x = conv(self.features, 3, "conv", self.compute, padding=1, bias=False)(x)
        return nn.relu(BatchNorm(self.sync, name="bn")(x, mask))


class Residual(nn.Module):
    block: Block
    sync: bool
    compute: Compute

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
        b = self.block
        y = conv(b.out_channels, 3, "conv1", self.compute, stride=b.stride, padding=1, bias=False)(x)
        y = nn.relu(BatchNorm(self.sync, name="bn1")(y, mask))
        y = conv(b.out_channels, 3, "conv2", self.compute, padding=1, bias=False)(y)
        y = BatchNorm(self.sync, name="bn2")(y, mask)
        skip = conv(b.out_channels, 1, "proj", self.compute, stride=b.stride)(x) if b.projection else x
        return nn.relu(y + skip)


class Stage(nn.Module):
    """One stage's blocks, so that the parameter paths read ``stageN.blockM``."""

    blocks: tuple[Block, ...]
    sync: bool
    compute: Compute

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
        for blk in self.blocks:
            x = Residual(blk, self.sync, self.compute, name=blk.prefix.split(".")[1])(x, mask)
        return x


class ResNet18(nn.Module):
    num_classes: int
    sync: bool = False
    compute: Compute = Compute()

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None) -> jax.Array:
        x = ConvBN(64, self.sync, self.compute, name="stem")(jnp.transpose(x, (0, 2, 3, 1)), mask)
        stages: dict[str, list[Block]] = {}
        for blk in resnet18_blocks():
            stages.setdefault(blk.prefix.split(".")[0], []).append(blk)
        for name, blocks in stages.items():
            x = Stage(tuple(blocks), self.sync, self.compute, name=name)(x, mask)
        return self.compute.logits(dense(self.num_classes, "fc", self.compute)(x.mean(axis=(1, 2))))


class LeNet(nn.Module):
    num_classes: int
    sync: bool = False  # no BatchNorm: accepted for a uniform signature
    compute: Compute = Compute()

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None) -> jax.Array:
        x = jnp.transpose(x, (0, 2, 3, 1))
        x = nn.avg_pool(nn.relu(conv(20, 3, "conv1", self.compute)(x)), (2, 2), strides=(2, 2))
        x = nn.avg_pool(nn.relu(conv(50, 5, "conv2", self.compute)(x)), (2, 2), strides=(2, 2))
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)  # canonical C, H, W order
        x = nn.relu(dense(128, "fc1", self.compute)(x))
        return self.compute.logits(dense(self.num_classes, "fc2", self.compute)(x))


def build(spec: ModelSpec, sync: bool, compute: Compute = Compute()) -> nn.Module:
    """The network for ``spec``; ``compute.cpu`` picks the CPU-friendly convolution for tiny outputs."""
    cls = ResNet18 if spec.name == "resnet18" else LeNet
    return cls(spec.num_classes, sync, compute)
