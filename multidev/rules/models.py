"""Canonical model layouts and initial weights (contract: Model and initial weights, §7).

The core owns the parameter names, shapes and tensor layout, and draws the
initial values with numpy from one seed. Engines build their own networks
with these names and load the arrays, so every engine starts from the same
weights and any checkpoint loads anywhere.

Layout: convolution weights are (out, in, kh, kw); dense weights are
(out, in); images are NCHW and flatten in C, H, W order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from multidev.errors import MultidevError

MODELS = ("resnet18", "lenet")


State = dict[str, np.ndarray]  # canonical name -> array, in spec order


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]
    role: str  # conv | dense | bias | gamma | beta | mean | var

    @property
    def trainable(self) -> bool:
        return self.role not in ("mean", "var")


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


def lenet_flat_features(height: int, width: int) -> int:
    """Features after LeNet's convolutions: conv3 -> pool2 -> conv5 -> pool2, 50 channels."""
    h, w = (height - 2) // 2, (width - 2) // 2
    h, w = (h - 4) // 2, (w - 4) // 2
    if h < 1 or w < 1:
        raise MultidevError(f"lenet needs images of at least 14x14, got {height}x{width}: "
                            f"use --model resnet18 or a data set with larger images")
    return 50 * h * w


@dataclass(frozen=True)
class ModelSpec:
    name: str
    in_shape: tuple[int, int, int]  # C, H, W
    num_classes: int

    def __post_init__(self) -> None:
        if self.name not in MODELS:
            raise MultidevError(f"unknown model {self.name!r}: choose one of {', '.join(MODELS)}")
        if self.name == "lenet":
            lenet_flat_features(*self.in_shape[1:])

    def params(self) -> list[Param]:
        return list(_resnet18(self) if self.name == "resnet18" else _lenet(self))

    def trainable(self) -> list[str]:
        return [p.name for p in self.params() if p.trainable]

    def statistics(self) -> list[str]:
        return [p.name for p in self.params() if not p.trainable]

    def init(self, seed: int) -> State:
        """Normal weights scaled by fan-in, zero biases, unit BatchNorm scale: one numpy stream per seed."""
        rng = np.random.default_rng(seed)
        state: State = {}
        for p in self.params():
            if p.role in ("conv", "dense"):
                fan_in = int(np.prod(p.shape[1:]))
                gain = 2.0 if p.role == "conv" else 1.0  # He for ReLU convolutions, LeCun for dense
                value = rng.normal(0.0, np.sqrt(gain / fan_in), p.shape)
            elif p.role in ("gamma", "var"):
                value = np.ones(p.shape)
            else:
                value = np.zeros(p.shape)
            state[p.name] = value.astype(np.float32)
        return state

    def check(self, state: State) -> None:
        """Raise if ``state`` does not hold exactly this model's arrays."""
        expected = {p.name: p.shape for p in self.params()}
        missing = sorted(set(expected) - set(state))
        extra = sorted(set(state) - set(expected))
        if missing or extra:
            raise MultidevError(f"state does not fit {self.name}: missing {missing[:3]}, unexpected {extra[:3]}")
        for name, shape in expected.items():
            if tuple(state[name].shape) != shape:
                raise MultidevError(f"{name} has shape {tuple(state[name].shape)}, {self.name} needs {shape}")


def _bn(prefix: str, channels: int) -> Iterator[Param]:
    yield Param(f"{prefix}.gamma", (channels,), "gamma")
    yield Param(f"{prefix}.beta", (channels,), "beta")
    yield Param(f"{prefix}.running_mean", (channels,), "mean")
    yield Param(f"{prefix}.running_var", (channels,), "var")


def _resnet18(spec: ModelSpec) -> Iterator[Param]:
    c = spec.in_shape[0]
    # Convolutions followed by BatchNorm carry no bias: BatchNorm's shift makes it redundant.
    yield Param("stem.conv.weight", (64, c, 3, 3), "conv")
    yield from _bn("stem.bn", 64)
    for blk in resnet18_blocks():
        yield Param(f"{blk.prefix}.conv1.weight", (blk.out_channels, blk.in_channels, 3, 3), "conv")
        yield from _bn(f"{blk.prefix}.bn1", blk.out_channels)
        yield Param(f"{blk.prefix}.conv2.weight", (blk.out_channels, blk.out_channels, 3, 3), "conv")
        yield from _bn(f"{blk.prefix}.bn2", blk.out_channels)
        if blk.projection:
            # As in the book, the 1x1 projection has a bias and no BatchNorm.
            yield Param(f"{blk.prefix}.proj.weight", (blk.out_channels, blk.in_channels, 1, 1), "conv")
            yield Param(f"{blk.prefix}.proj.bias", (blk.out_channels,), "bias")
    yield Param("fc.weight", (spec.num_classes, 512), "dense")
    yield Param("fc.bias", (spec.num_classes,), "bias")


def _lenet(spec: ModelSpec) -> Iterator[Param]:
    c, h, w = spec.in_shape
    yield Param("conv1.weight", (20, c, 3, 3), "conv")
    yield Param("conv1.bias", (20,), "bias")
    yield Param("conv2.weight", (50, 20, 5, 5), "conv")
    yield Param("conv2.bias", (50,), "bias")
    yield Param("fc1.weight", (128, lenet_flat_features(h, w)), "dense")
    yield Param("fc1.bias", (128,), "bias")
    yield Param("fc2.weight", (spec.num_classes, 128), "dense")
    yield Param("fc2.bias", (spec.num_classes,), "bias")
