"""The model language's convolutions and pools (``multidev.nn.windows``) on MXNet's own operators.

Gluon's ``Conv2D`` and MXNet's ``Pooling`` pad both sides of an axis alike,
so padding that differs between the sides ("same", four sides) goes in
first through ``pad`` (zeros for a convolution and a mean, -inf for a max,
which ignores padding); the operator pads the rest.

``Pooling``'s ``pooling_convention="full"`` is not ``ceil_mode``: it keeps a
last window that starts in the padding after the input, which the language
drops, and oneDNN's float32 backward of such a mean (``count_include_pad``)
counts the positions past the padding (measured, MXNet 1.9.1: gradients off
by 0.15 to 0.6, the forward right). So a pool whose windows reach past the
padding pads them explicitly and takes "valid" windows, whose count is then
the language's; a mean is then window sums over each window's count of the
positions it counts, from the same pad and pool of ones.
"""

from __future__ import annotations

from typing import Union

from multidev import nn as mnn  # the model language; `nn` is Gluon's

from .runtime import mxnet

mx = mxnet()

nn = mx.gluon.nn

Shape = tuple[int, ...]
Sides = tuple[int, int, int, int]  # top, bottom, left, right


def _pad_width(sides: Sides) -> tuple[int, ...]:
    """MXNet's ``pad_width`` for NCHW: no padding of the batch or channels, then (top, bottom), (left, right)."""
    return (0, 0, 0, 0, *sides)


class Conv2D(nn.Conv2D):
    """Gluon's Conv2D for inputs of ``shape`` (C, H, W): zeros where the sides differ go in before it.

    A subclass, so that the parameters stay ``weight`` and ``bias`` at the node's structured name.
    """

    def __init__(self, layer: mnn.Conv2d, shape: Shape) -> None:
        top, bottom, left, right = layer.sides(shape)
        rows, cols = min(top, bottom), min(left, right)
        super().__init__(layer.out_channels, layer.kernel_size, strides=layer.stride, padding=(rows, cols),
                         dilation=layer.dilation, groups=layer.groups, use_bias=layer.bias, in_channels=shape[0])
        excess = (top - rows, bottom - rows, left - cols, right - cols)
        self.excess = _pad_width(excess) if any(excess) else None

    def hybrid_forward(self, F, x, weight, bias=None):
        if self.excess is not None:
            x = F.pad(x, mode="constant", pad_width=self.excess, constant_value=0.0)
        return super().hybrid_forward(F, x, weight, bias)


def pool(F, layer: Union[mnn.MaxPool2d, mnn.AvgPool2d], x, shape: Shape):
    """``layer`` on ``x``, whose samples have ``shape`` (C, H, W)."""
    k, s = layer.kernel_size, layer.step
    top, bottom, left, right = layer.sides(shape)
    below, after = layer.ceil_extra(shape)
    average = isinstance(layer, mnn.AvgPool2d)
    kind = "avg" if average else "max"
    if top == bottom and left == right and not (below or after):  # the operator's own padding is the language's
        return F.Pooling(x, kernel=(k, k), stride=(s, s), pad=(top, left), pool_type=kind,
                         pooling_convention="valid", count_include_pad=not average or layer.count_include_pad)
    width = _pad_width((top, bottom + below, left, right + after))
    if not average:
        padded = F.pad(x, mode="constant", pad_width=width, constant_value=float("-inf"))
        return F.Pooling(padded, kernel=(k, k), stride=(s, s), pool_type="max", pooling_convention="valid")
    sums = F.Pooling(F.pad(x, mode="constant", pad_width=width, constant_value=0.0), kernel=(k, k),
                     stride=(s, s), pool_type="sum", pooling_convention="valid")
    return F.broadcast_div(sums, _counts(F, layer, x, (top, bottom, left, right), (below, after)))


def _counts(F, layer: mnn.AvgPool2d, x, sides: Sides, extra: tuple[int, int]):
    """(1, 1, OH, OW): how many positions each window counts (the padding's too with ``count_include_pad``).

    Ones of one sample's plane, padded by ones (or zeros) and then by zeros for ``ceil_mode``'s positions, and
    summed by the same windows; derived from ``x`` so that it takes ``x``'s dtype in a compiled graph.
    """
    k, s = layer.kernel_size, layer.step
    ones = F.ones_like(F.slice(F.stop_gradient(x), begin=(0, 0, None, None), end=(1, 1, None, None)))
    padded = F.pad(ones, mode="constant", pad_width=_pad_width(sides),
                   constant_value=1.0 if layer.count_include_pad else 0.0)
    if any(extra):
        padded = F.pad(padded, mode="constant", pad_width=_pad_width((0, extra[0], 0, extra[1])), constant_value=0.0)
    return F.stop_gradient(F.Pooling(padded, kernel=(k, k), stride=(s, s), pool_type="sum",
                                     pooling_convention="valid"))
