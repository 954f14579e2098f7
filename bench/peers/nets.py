"""The model table's networks as numbers, the one source every contender builds from: a hand-written network can
only differ from multidev's where its own code does, and the parameter counts check that it does not.

- ``resnet50``: torchvision's ResNet-50 (v1.5: the stride on the 3x3 convolution; a 7x7 stem at stride 2 and a 3x3
  max pooling), bottleneck blocks of (64, 128, 256, 512) inner channels, 4 times as many out.
- ``mobilenet_v2``: the zoo's MobileNetV2, torchvision's blocks with its stem and first two stages at stride 1.
- ``vit``: the zoo's Vision Transformer, at its defaults (patch 4, 64 features, 4 blocks of 4 heads, MLP 128).

A smoke run (``smoke``) keeps every kind of block but fewer of them, and a narrower ViT, so that XLA compiles
each in seconds.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from multidev.nn import zoo

NAMES = ("resnet50", "mobilenet_v2", "vit")
CLASSES = 10
#: bottleneck blocks per stage of torchvision's resnet50, and their inner widths (out: ``EXPANSION`` x)
RESNET50_BLOCKS = (3, 4, 6, 3)
RESNET_WIDTHS = (64, 128, 256, 512)
EXPANSION = 4
#: MobileNetV2: the stem's width and stride (the zoo's: torchvision's is 2), the last 1x1 convolution's width, and
#: the Dropout before the classifier
MOBILENET_STEM = (32, 1)
MOBILENET_LAST = 1280
MOBILENET_DROPOUT = 0.2
#: (expansion, channels, blocks, first stride) of each inverted residual stage: the zoo's own table
MOBILENET_STAGES: tuple[tuple[int, int, int, int], ...] = tuple(tuple(s) for s in zoo.MOBILENET_V2_STAGES)
#: the zoo's ViT: its builder's defaults (patch, dim, depth, heads, mlp)
VIT = {k: p.default for k, p in inspect.signature(zoo.vit).parameters.items() if k != "drop_path"}
#: BatchNorm as torch's defaults and multidev's rule have it (Keras' own defaults are 0.99 and 1e-3)
BN_MOMENTUM, BN_EPS = 0.9, 1e-5
LN_EPS = 1e-6

SMOKE_BLOCKS = (1, 1, 1, 1)
SMOKE_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2))  # one block that adds its input, one that does not
SMOKE_VIT = {"patch": 4, "dim": 16, "depth": 1, "heads": 2, "mlp": 32}


@dataclass(frozen=True)
class Net:
    """One network of the table at one image size (3 channels, ``CLASSES`` classes)."""

    name: str
    size: int
    blocks: tuple[int, ...] = RESNET50_BLOCKS
    stages: tuple[tuple[int, int, int, int], ...] = MOBILENET_STAGES
    patch: int = VIT["patch"]
    dim: int = VIT["dim"]
    depth: int = VIT["depth"]
    heads: int = VIT["heads"]
    mlp: int = VIT["mlp"]

    @classmethod
    def of(cls, name: str, size: int, smoke: bool = False) -> "Net":
        """The table's network ``name`` (its smoke run's where ``smoke``)."""
        if name not in NAMES:
            raise ValueError(f"unknown network {name!r}: the table has {', '.join(NAMES)}")
        if not smoke:
            return cls(name, size)
        return cls(name, size, blocks=SMOKE_BLOCKS, stages=SMOKE_STAGES, **SMOKE_VIT)

    @property
    def in_shape(self) -> tuple[int, int, int]:
        return (3, self.size, self.size)

    @property
    def tokens(self) -> int:
        """The ViT's sequence: one token a patch, and the class token."""
        return (self.size // self.patch) ** 2 + 1

    def resnet_stages(self) -> list[tuple[int, int, int]]:
        """(inner width, blocks, first stride) of each ResNet stage."""
        return [(w, n, 1 if i == 0 else 2) for i, (w, n) in enumerate(zip(RESNET_WIDTHS, self.blocks))]

    def mobilenet_blocks(self) -> list[tuple[int, int, int, int]]:
        """(in channels, expansion, out channels, stride) of every inverted residual block, in order."""
        found, cin = [], MOBILENET_STEM[0]
        for expansion, cout, count, stride in self.stages:
            for i in range(count):
                found.append((cin, expansion, cout, stride if i == 0 else 1))
                cin = cout
        return found


def uses_onnx(net: Net) -> bool:
    """Whether multidev's side is torchvision's network read from an ONNX file (the ViT is the zoo's own)."""
    return net.name != "vit"
