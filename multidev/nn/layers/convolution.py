"""Layers that slide a window over images: convolutions and pools, their geometry from ``multidev.nn.windows``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from multidev.errors import MultidevError
from multidev.nn import windows as W
from multidev.nn.layers.base import Layer, Shape, image, whole


def window(layer: Layer, node: str, shape: Shape, k: int, stride: int, padding: W.Padding = 0,
            dilation: int = 1, ceil_mode: bool = False) -> tuple[int, int]:
    """The output's (rows, columns); a window that does not fit is one line naming the layer."""
    c, h, w = image(layer, node, shape)
    top, bottom, left, right = W.sides(padding, (h, w), k, stride, dilation)
    oh = W.out_size(h, k, stride, top, bottom, dilation, ceil_mode)
    ow = W.out_size(w, k, stride, left, right, dilation, ceil_mode)
    if oh < 1 or ow < 1:
        span = dilation * (k - 1) + 1
        raise MultidevError(f"{layer.where(node)}: its {k}x{k} window"
                            + (f" (dilated to {span}x{span})" if dilation > 1 else "")
                            + f" is larger than its {h}x{w} input"
                            + (f" (padded by {padding})" if padding else "") + ": use a smaller kernel, more "
                            "padding, or less pooling before it")
    return oh, ow


@dataclass(frozen=True)
class Conv2d(Layer):
    """Cross-correlation of every group of input channels with its own filters (``groups``: depthwise when equal
    to the input's channels); padding as :mod:`multidev.nn.windows` states it (zeros)."""

    kind: ClassVar[str] = "conv"
    out_channels: int
    kernel_size: int
    stride: int = 1
    padding: W.Padding = 0
    bias: bool = True
    groups: int = 1
    dilation: int = 1

    def __post_init__(self) -> None:
        whole(self.out_channels, "Conv2d's out_channels")
        whole(self.kernel_size, "Conv2d's kernel_size")
        whole(self.stride, "Conv2d's stride")
        whole(self.groups, "Conv2d's groups")
        whole(self.dilation, "Conv2d's dilation")
        object.__setattr__(self, "padding", W.padding_value(self.padding, "Conv2d's padding"))
        if self.out_channels % self.groups:
            raise MultidevError(f"Conv2d's out_channels {self.out_channels} is not a multiple of its groups "
                                f"{self.groups}: every group needs as many filters")

    def sides(self, shape: Shape) -> W.Sides:
        """The zeros added (top, bottom, left, right) for an input of ``shape`` (C, H, W)."""
        return W.sides(self.padding, shape[1:], self.kernel_size, self.stride, self.dilation)

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        cin = image(self, node, shapes[0])[0]
        if cin % self.groups:
            raise MultidevError(f"{self.where(node)} splits {cin} input channels into {self.groups} groups: make "
                                f"the channels a multiple of the groups")
        return (self.out_channels, *window(self, node, shapes[0], self.kernel_size, self.stride, self.padding,
                                            self.dilation))

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        k = self.kernel_size
        out = [("weight", (self.out_channels, shapes[0][0] // self.groups, k, k), "conv")]
        return out + ([("bias", (self.out_channels,), "bias")] if self.bias else [])


@dataclass(frozen=True)
class MaxPool2d(Layer):
    """A k x k window every ``stride`` (default k) pixels; padding as :mod:`multidev.nn.windows` states it, which
    max ignores (as if -inf); ``ceil_mode``: the output size rounds up (torch's and ONNX's rule)."""

    kind: ClassVar[str] = "maxpool"
    kernel_size: int
    stride: Optional[int] = None
    padding: W.Padding = 0
    ceil_mode: bool = False

    def __post_init__(self) -> None:
        whole(self.kernel_size, f"{type(self).__name__}'s kernel_size")
        if self.stride is not None:
            whole(self.stride, f"{type(self).__name__}'s stride")
        object.__setattr__(self, "padding", W.padding_value(self.padding, f"{type(self).__name__}'s padding"))
        if not isinstance(self.ceil_mode, bool):
            raise MultidevError(f"{type(self).__name__}'s ceil_mode must be True or False, got {self.ceil_mode!r}")
        sides = (self.padding,) if isinstance(self.padding, int) else () if self.padding == "same" \
            else self.padding
        if any(2 * side > self.kernel_size for side in sides):
            raise MultidevError(f"{type(self).__name__}'s padding {self.padding} is more than half its kernel "
                                f"{self.kernel_size}: a window could hold padding only (torch refuses it too)")

    @property
    def step(self) -> int:
        return self.stride or self.kernel_size

    def sides(self, shape: Shape) -> W.Sides:
        """The padding (top, bottom, left, right) for an input of ``shape`` (C, H, W), ``ceil_mode``'s not included."""
        return W.sides(self.padding, shape[1:], self.kernel_size, self.step)

    def ceil_extra(self, shape: Shape) -> tuple[int, int]:
        """The rows and columns ``ceil_mode``'s last windows reach past the padding (bottom, right)."""
        top, bottom, left, right = self.sides(shape)
        return (W.ceil_extra(shape[1], self.kernel_size, self.step, top, bottom, self.ceil_mode),
                W.ceil_extra(shape[2], self.kernel_size, self.step, left, right, self.ceil_mode))

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return (shapes[0][0], *window(self, node, shapes[0], self.kernel_size, self.step, self.padding, 1,
                                       self.ceil_mode))


@dataclass(frozen=True)
class AvgPool2d(MaxPool2d):
    """The mean of each window; ``count_include_pad``: the padding's zeros count in the divisor (torch's default),
    never the positions ``ceil_mode`` adds past the padding."""

    kind: ClassVar[str] = "avgpool"
    count_include_pad: bool = True


@dataclass(frozen=True)
class GlobalAvgPool(Layer):
    """The mean of each channel over H and W: images (C, H, W) to features (C,)."""

    kind: ClassVar[str] = "gap"
    #: (C, 1, 1) rather than (C,): what a squeeze-and-excitation block multiplies its images by
    keepdims: bool = False

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        c = image(self, node, shapes[0])[0]
        return (c, 1, 1) if self.keepdims else (c,)
