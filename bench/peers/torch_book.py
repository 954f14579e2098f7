"""The book's networks in plain PyTorch (d2l "Residual" and "resnet_block"), and the book's loop over them: what
``bench.bench_torch`` times the engine against, and ``bench.bench_engines``' first step of the framework alone."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.peers.torch_loop import replicated_step


class Residual(nn.Module):
    """The book's residual block (d2l "Residual"): two 3x3 convolutions, a 1x1 projection where the shape changes."""

    def __init__(self, channels_in: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, padding=1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm2d(channels), nn.BatchNorm2d(channels)
        self.proj = nn.Conv2d(channels_in, channels, 1, stride) if stride != 1 or channels_in != channels else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


def resnet18(channels_in: int, classes: int) -> nn.Module:
    """The book's small-image ResNet-18: a 3x3 stem, no max pooling, four stages of two residual blocks."""
    layers: list[nn.Module] = [nn.Conv2d(channels_in, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    width = 64
    for stage, channels in enumerate((64, 128, 256, 512)):
        layers += [Residual(width, channels, 2 if stage else 1), Residual(channels, channels, 1)]
        width = channels
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


def mlp(features: int, classes: int) -> nn.Module:
    """multidev's ``mlp`` (a smoke run's): the image flattened, two hidden layers of 256."""
    return nn.Sequential(nn.Flatten(), nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, classes))


def book_step(model: str, k: int, x: np.ndarray, y: np.ndarray, lr: float) -> Callable[[], None]:
    """One step of the book's ``model`` (resnet18, or mlp for a smoke run) on ``k`` replicas, plain SGD."""
    classes = 10
    replicas = [resnet18(x.shape[1], classes) if model == "resnet18" else mlp(int(np.prod(x.shape[1:])), classes)
                for _ in range(k)]
    for r in replicas[1:]:
        r.load_state_dict(replicas[0].state_dict())
    return replicated_step(replicas, torch.from_numpy(x), torch.from_numpy(y), lr=lr, momentum=0.0)
