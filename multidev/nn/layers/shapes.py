"""Layers that rearrange a sample's values without computing: flatten, reshape, transpose, slice, pad.

Axes count the sample's axes, the batch left out (0 is an image's channels,
a token sequence's tokens), and may count from the end (-1 the last).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

from multidev.errors import MultidevError
from multidev.nn.layers.base import Layer, Shape, sample_axis


@dataclass(frozen=True)
class Flatten(Layer):
    """Any sample to one axis (C * H * W,), in C, H, W order; features pass as they are."""

    kind: ClassVar[str] = "flatten"

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return (math.prod(shapes[0]),)


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise MultidevError(f"{what} must be a tuple of whole numbers, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class Reshape(Layer):
    """The sample's values in C order, given a new ``shape`` (the batch left out; one -1 takes what is left)."""

    kind: ClassVar[str] = "reshape"
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        shape = _ints(self.shape, "Reshape's shape")
        if shape.count(-1) > 1 or any(n < -1 or n == 0 for n in shape):
            raise MultidevError(f"Reshape's shape {shape} may hold one -1 and sizes of at least 1")
        object.__setattr__(self, "shape", shape)

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        size, known = math.prod(shapes[0]), -math.prod(self.shape) if -1 in self.shape else math.prod(self.shape)
        out = tuple(size // known if n == -1 else n for n in self.shape) if size % known == 0 else ()
        if math.prod(out) != size:
            raise MultidevError(f"{self.where(node)} cannot give {shapes[0]} ({size} values) the shape {self.shape}")
        return out


@dataclass(frozen=True)
class Transpose(Layer):
    """The sample's axes in the order ``perm`` (a permutation of 0 .. rank - 1, the batch left out)."""

    kind: ClassVar[str] = "transpose"
    perm: tuple[int, ...]

    def __post_init__(self) -> None:
        perm = _ints(self.perm, "Transpose's perm")
        if sorted(perm) != list(range(len(perm))):
            raise MultidevError(f"Transpose's perm {perm} is not an order of the axes 0 .. {len(perm) - 1}")
        object.__setattr__(self, "perm", perm)

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if len(self.perm) != len(shapes[0]):
            raise MultidevError(f"{self.where(node)} orders {len(self.perm)} axes, its input {shapes[0]} has "
                                f"{len(shapes[0])}")
        return tuple(shapes[0][p] for p in self.perm)


@dataclass(frozen=True)
class Slice(Layer):
    """``x[start:stop:step]`` along ``axis`` of the sample, as Python slices (clipped to the axis; step >= 1):
    a ViT's class token is ``Slice(0, 0, 1)``."""

    kind: ClassVar[str] = "slice"
    axis: int
    start: int = 0
    stop: Optional[int] = None
    step: int = 1

    def __post_init__(self) -> None:
        ends = [self.axis, self.start] + ([] if self.stop is None else [self.stop])
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ends) or \
                not isinstance(self.step, int) or self.step < 1:
            raise MultidevError(f"Slice takes whole numbers axis, start, stop (or None) and a step of at least 1, "
                                f"got {self.axis!r}, {self.start!r}, {self.stop!r}, {self.step!r}")

    def bounds(self, shape: Shape) -> tuple[int, int, int, int]:
        """(axis, start, stop, step) within a sample of ``shape``, as Python resolves the slice."""
        axis = self.axis % len(shape)
        start, stop, step = slice(self.start, self.stop, self.step).indices(shape[axis])
        return axis, start, stop, step

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        axis = sample_axis(self, node, self.axis, len(shapes[0]))
        _, start, stop, step = self.bounds(shapes[0])
        n = len(range(start, stop, step))
        if n == 0:
            raise MultidevError(f"{self.where(node)} takes nothing of axis {self.axis} ({shapes[0][axis]} long): "
                                f"give a start before its stop")
        return shapes[0][:axis] + (n,) + shapes[0][axis + 1:]


@dataclass(frozen=True)
class Pad(Layer):
    """``before`` and ``after`` values of ``value`` added along ``axis`` of the sample (ONNX's and NumPy's constant
    padding, one axis a layer); Conv2d and the pools pad the images they read themselves."""

    kind: ClassVar[str] = "pad"
    axis: int
    before: int = 0
    after: int = 0
    value: float = 0.0

    def __post_init__(self) -> None:
        sizes = (self.axis, self.before, self.after)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes) or min(sizes[1:]) < 0:
            raise MultidevError(f"Pad takes a whole-number axis and before and after of at least 0, got "
                                f"{self.axis!r}, {self.before!r}, {self.after!r}")
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) or self.value != self.value:
            raise MultidevError(f"Pad's value must be a number, got {self.value!r}")
        object.__setattr__(self, "value", float(self.value))

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        axis = sample_axis(self, node, self.axis, len(shapes[0]))
        return shapes[0][:axis] + (shapes[0][axis] + self.before + self.after,) + shapes[0][axis + 1:]
