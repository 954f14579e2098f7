"""The book's small-image ResNet-18 and LeNet, with the core's canonical names.

Module attribute paths equal the canonical names, so ``state_dict()`` is the
canonical state with no renaming.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from multidev.engine import ModelSpec, lenet_flat_features, resnet18_blocks

from .batchnorm import BatchNorm


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn = BatchNorm(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Residual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, projection: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = BatchNorm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = BatchNorm(cout)
        self.proj = nn.Conv2d(cin, cout, 1, stride=stride) if projection else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.proj is None else self.proj(x)))


class ResNet18(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.stem = ConvBN(spec.in_shape[0], 64)
        self.blocks: list[str] = []
        for blk in resnet18_blocks():
            stage, block = blk.prefix.split(".")
            if not hasattr(self, stage):
                self.add_module(stage, nn.Module())
            getattr(self, stage).add_module(block, Residual(blk.in_channels, blk.out_channels,
                                                            blk.stride, blk.projection))
            self.blocks.append(blk.prefix)
        self.fc = nn.Linear(512, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for prefix in self.blocks:
            x = self.get_submodule(prefix)(x)
        return self.fc(x.mean(dim=(2, 3)))


class LeNet(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        c, h, w = spec.in_shape
        self.conv1 = nn.Conv2d(c, 20, 3)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(lenet_flat_features(h, w), 128)
        self.fc2 = nn.Linear(128, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(F.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def build(spec: ModelSpec) -> nn.Module:
    return ResNet18(spec) if spec.name == "resnet18" else LeNet(spec)
