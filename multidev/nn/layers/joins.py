"""Layers of two or more inputs, and the layers that change a sample's shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

from multidev.errors import MultidevError
from multidev.nn.layers.base import Layer, Shape


@dataclass(frozen=True)
class Flatten(Layer):
    """Images (C, H, W) to features (C * H * W,), in C, H, W order; features pass as they are."""

    kind: ClassVar[str] = "flatten"

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return (math.prod(shapes[0]),)


@dataclass(frozen=True)
class Add(Layer):
    """The sum of two or more inputs of one shape (a residual connection)."""

    kind: ClassVar[str] = "add"
    arity: ClassVar[Optional[int]] = None

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if any(s != shapes[0] for s in shapes):
            raise MultidevError(f"{self.where(node)} adds inputs of other shapes: "
                                f"{' and '.join(map(str, shapes))}; make them agree (a 1x1 Conv2d on the shortcut)")
        return shapes[0]


@dataclass(frozen=True)
class Concat(Layer):
    """Two or more inputs side by side: images along the channels, features along the features."""

    kind: ClassVar[str] = "concat"
    arity: ClassVar[Optional[int]] = None

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if len({len(s) for s in shapes}) != 1 or any(s[1:] != shapes[0][1:] for s in shapes):
            raise MultidevError(f"{self.where(node)} joins inputs whose shapes differ past the first axis: "
                                f"{' and '.join(map(str, shapes))}")
        return (sum(s[0] for s in shapes), *shapes[0][1:])


def broadcast(layer: Layer, node: str, shapes: list[Shape]) -> Shape:
    """NumPy's broadcasting of the samples' shapes (the batch axis apart); shapes that do not broadcast: one line."""
    rank = max(map(len, shapes))
    out = []
    for sizes in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        big = {n for n in sizes if n != 1}
        if len(big) > 1:
            raise MultidevError(f"{layer.where(node)} combines inputs of shapes {' and '.join(map(str, shapes))}, "
                                f"which do not broadcast: make each axis equal or 1")
        out.append(big.pop() if big else 1)
    return tuple(out)


@dataclass(frozen=True)
class Mul(Layer):
    """The elementwise product of two or more inputs, broadcast as NumPy does (the batch axis apart): gates such
    as squeeze-and-excitation's (C, H, W) * (C, 1, 1)."""

    kind: ClassVar[str] = "mul"
    arity: ClassVar[Optional[int]] = None

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return broadcast(self, node, shapes)
