"""What every layer is: a frozen value of hyperparameters that states its output shape and its parameters.

A layer knows the shape it gives for the shapes it gets (:meth:`Layer.infer`,
one line naming the layer when they do not fit) and the parameters it holds
for them (:meth:`Layer.params`, canonical roles that decide the initial
values). Shapes leave out the batch: ``(C, H, W)`` for images (the core's
NCHW layout), ``(F,)`` for feature vectors.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar, Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn.node import Node, apply

Shape = tuple[int, ...]
#: LayerNorm's epsilon, as torch's and ONNX's default
LN_EPS = 1e-5
State = dict[str, np.ndarray]  # canonical name -> array, in the model's order


@dataclass(frozen=True)
class Param:
    """One array of a model: canonical name, shape, and role (which decides its initial value)."""

    name: str
    shape: tuple[int, ...]
    role: str  # conv | dense | bias | gamma | beta | mean | var | token | position

    @property
    def trainable(self) -> bool:
        return self.role not in ("mean", "var")


@dataclass(frozen=True)
class Layer:
    """A layer; ``name`` (keyword only) names its parameters, else the graph numbers it by kind (conv1, bn2)."""

    #: the name's stem when the graph numbers layers, and the name a definition stores
    kind: ClassVar[str] = "layer"
    #: how many inputs it takes (None: two or more)
    arity: ClassVar[Optional[int]] = 1
    name: Optional[str] = field(default=None, kw_only=True)

    def __call__(self, *inputs: Node) -> Node:
        """The functional form: this layer applied to the outputs of other layers (``nn.Input()`` first)."""
        return apply(self, inputs)

    def where(self, node: str) -> str:
        return f"{type(self).__name__} {node!r}"

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        """The output shape for ``shapes``; a shape that does not fit is one line naming ``node``."""
        return shapes[0]

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        """(name within the layer, shape, role) of each parameter; the roles are :class:`Param`'s."""
        return []

    def arguments(self) -> dict:
        """The hyperparameters, as a definition stores them: those at their default left out, so a definition
        that uses nothing new reads in a multidev that predates a new hyperparameter."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "name" and (f.default is MISSING or getattr(self, f.name) != f.default)}


def image(layer: Layer, node: str, shape: Shape) -> Shape:
    if len(shape) != 3:
        raise MultidevError(f"{layer.where(node)} needs images (C, H, W) but gets features {shape}: "
                            f"give it image data, or drop it from a model of feature vectors")
    return shape


def whole(value: object, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MultidevError(f"{what} must be a whole number of at least {minimum}, got {value!r}")
    return value


def fraction(value: object, what: str, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
        raise MultidevError(f"{what} must be a number between {low:g} and {high:g}, got {value!r}")
    return float(value)


def sample_axis(layer: Layer, node: str, axis: int, rank: int) -> int:
    """``axis`` of a sample of ``rank`` axes (negative from the end); one out of range is one line."""
    if not -rank <= axis < rank:
        raise MultidevError(f"{layer.where(node)} works on axis {axis}, its input has {rank} axes (the batch "
                            f"left out): give an axis in {-rank} .. {rank - 1}")
    return axis % rank
