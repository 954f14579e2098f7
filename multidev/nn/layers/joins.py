"""Layers of two or more inputs: sums, differences, products and quotients (broadcasting as NumPy does) and
concatenations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from multidev.errors import MultidevError
from multidev.nn.layers.base import Layer, Shape, sample_axis


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
    """Two or more inputs side by side along ``axis`` of the sample (0: images' channels, features' features;
    tokens (L, D): the tokens)."""

    kind: ClassVar[str] = "concat"
    arity: ClassVar[Optional[int]] = None
    axis: int = 0

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if len({len(s) for s in shapes}) != 1:
            raise MultidevError(f"{self.where(node)} joins inputs of other ranks: {' and '.join(map(str, shapes))}")
        axis = sample_axis(self, node, self.axis, len(shapes[0]))
        if any(s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:] for s in shapes):
            raise MultidevError(f"{self.where(node)} joins inputs whose shapes differ off its axis {self.axis}: "
                                f"{' and '.join(map(str, shapes))}")
        return shapes[0][:axis] + (sum(s[axis] for s in shapes),) + shapes[0][axis + 1:]


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


class Broadcasting(Layer):
    """An elementwise layer of its inputs broadcast as NumPy does (the batch axis apart)."""

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return broadcast(self, node, shapes)


@dataclass(frozen=True)
class Mul(Broadcasting):
    """The elementwise product of two or more inputs: gates such as squeeze-and-excitation's (C, H, W) * (C, 1, 1)."""

    kind: ClassVar[str] = "mul"
    arity: ClassVar[Optional[int]] = None


@dataclass(frozen=True)
class Sub(Broadcasting):
    """The first input minus the second."""

    kind: ClassVar[str] = "sub"
    arity: ClassVar[Optional[int]] = 2


@dataclass(frozen=True)
class Div(Broadcasting):
    """The first input divided by the second: a normalisation written out, x / sqrt(mean(x^2) + eps)."""

    kind: ClassVar[str] = "div"
    arity: ClassVar[Optional[int]] = 2


@dataclass(frozen=True)
class MatMul(Layer):
    """The matrix product of two activations, (..., M, K) @ (..., K, N), the leading axes broadcast: attention's
    queries times keys, and its weights times values."""

    kind: ClassVar[str] = "matmul"
    arity: ClassVar[Optional[int]] = 2

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        a, b = shapes
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            raise MultidevError(f"{self.where(node)} multiplies {a} by {b}: each sample needs matrices "
                                f"(..., M, K) and (..., K, N)")
        return broadcast(self, node, [a[:-2], b[:-2]]) + (a[-2], b[-1])
