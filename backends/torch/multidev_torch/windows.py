"""The model language's convolutions and pools (``multidev.nn.windows``) on torch's own kernels.

Where the padding is the same on both sides of each axis (and, for pools,
within torch's bound of half the kernel), torch's layers take it
themselves and are the definition. Otherwise ``F.pad`` adds it before a
kernel without padding: zeros for a convolution and a mean, -inf for a max
(which ignores padding). A pool's output is then cut to the language's size:
on input it sees as unpadded, torch's ``ceil_mode`` keeps a last window that
starts in the padding after the input, which the language drops; the
windows both keep are the same ones, clipped alike to the padded input, so
``ceil_mode``'s positions past the padding never count in a mean.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from multidev.nn import layers as L

Shape = tuple[int, ...]
Pool = Callable[[torch.Tensor], torch.Tensor]


class Conv2d(nn.Conv2d):
    """torch's Conv2d for an input of ``shape`` (C, H, W); ``F.pad`` before it where the sides differ.

    A subclass, so that the parameters stay ``weight`` and ``bias`` at the node's canonical path.
    """

    def __init__(self, layer: L.Conv2d, shape: Shape) -> None:
        top, bottom, left, right = layer.sides(shape)
        even = top == bottom and left == right
        super().__init__(shape[0], layer.out_channels, layer.kernel_size, stride=layer.stride,
                         padding=(top, left) if even else 0, dilation=layer.dilation, groups=layer.groups,
                         bias=layer.bias)
        self.sides = None if even else (left, right, top, bottom)  # F.pad's order: the last axis first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x if self.sides is None else F.pad(x, self.sides))

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.sides is None else f", sides={self.sides}")


def pool(layer: Union[L.MaxPool2d, L.AvgPool2d], shape: Shape) -> Pool:
    """``layer`` for inputs of ``shape`` (C, H, W), its padding worked out once (partials: a model pickles)."""
    k, stride, ceil = layer.kernel_size, layer.step, layer.ceil_mode
    top, bottom, left, right = layer.sides(shape)
    average = isinstance(layer, L.AvgPool2d)
    if top == bottom and left == right and 2 * max(top, left) <= k:
        if average:
            return functools.partial(F.avg_pool2d, kernel_size=k, stride=stride, padding=(top, left),
                                     ceil_mode=ceil, count_include_pad=layer.count_include_pad)
        return functools.partial(F.max_pool2d, kernel_size=k, stride=stride, padding=(top, left), ceil_mode=ceil)
    window = Window((left, right, top, bottom), k, stride, ceil, tuple(layer.infer(layer.kind, [shape])[1:]))
    if not average:
        return functools.partial(_padded_max, window=window)
    return functools.partial(_padded_mean, window=window, count_pad=layer.count_include_pad)


@dataclass(frozen=True)
class Window:
    """A pool's window on padding added by ``F.pad``: ``sides`` in its order, and the language's output size."""

    sides: tuple[int, int, int, int]
    kernel: int
    stride: int
    ceil_mode: bool
    size: tuple[int, int]

    def cut(self, y: torch.Tensor) -> torch.Tensor:
        return y[..., :self.size[0], :self.size[1]]


def _padded_max(x: torch.Tensor, window: Window) -> torch.Tensor:
    padded = F.pad(x, window.sides, value=float("-inf"))
    return window.cut(F.max_pool2d(padded, window.kernel, window.stride, ceil_mode=window.ceil_mode))


def _padded_mean(x: torch.Tensor, window: Window, count_pad: bool) -> torch.Tensor:
    """torch's divisor counts what ``F.pad`` added; without ``count_pad``, window sums over the counts of the
    input's own positions in each window instead."""
    def pooled(t: torch.Tensor, divisor: Optional[int]) -> torch.Tensor:
        return F.avg_pool2d(F.pad(t, window.sides), window.kernel, window.stride, ceil_mode=window.ceil_mode,
                            divisor_override=divisor)
    if count_pad:
        return window.cut(pooled(x, None))
    return window.cut(pooled(x, 1) / pooled(x.new_ones(1, 1, *x.shape[2:]), 1))
