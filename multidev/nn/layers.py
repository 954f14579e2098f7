"""The layers of the model language: hyperparameters only, each stating its output size, never its input's.

A layer is a frozen value. It knows the shape it gives for the shapes it
gets (:meth:`Layer.infer`, one line naming the layer when they do not fit)
and the parameters it holds for them (:meth:`Layer.params`, canonical roles
that decide the initial values). Shapes leave out the batch: ``(C, H, W)``
for images (the core's NCHW layout), ``(F,)`` for feature vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
    role: str  # conv | dense | bias | gamma | beta | mean | var

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
        """(name within the layer, shape, role) of each parameter; roles: conv, dense, bias, gamma, beta, mean, var."""
        return []

    def arguments(self) -> dict:
        """The hyperparameters, as a definition stores them."""
        return {k: v for k, v in vars(self).items() if k != "name"}


def _image(layer: Layer, node: str, shape: Shape) -> Shape:
    if len(shape) != 3:
        raise MultidevError(f"{layer.where(node)} needs images (C, H, W) but gets features {shape}: "
                            f"give it image data, or drop it from a model of feature vectors")
    return shape


def _whole(value: object, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MultidevError(f"{what} must be a whole number of at least {minimum}, got {value!r}")
    return value


def _window(layer: Layer, node: str, shape: Shape, k: int, stride: int, padding: int = 0) -> tuple[int, int]:
    c, h, w = _image(layer, node, shape)
    if k > h + 2 * padding or k > w + 2 * padding:
        raise MultidevError(f"{layer.where(node)}: its {k}x{k} window is larger than its {h}x{w} input"
                            + (f" (padded by {padding})" if padding else "") + ": use a smaller kernel, more "
                            "padding, or less pooling before it")
    return (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1


@dataclass(frozen=True)
class Conv2d(Layer):
    kind: ClassVar[str] = "conv"
    out_channels: int
    kernel_size: int
    stride: int = 1
    padding: int = 0
    bias: bool = True

    def __post_init__(self) -> None:
        _whole(self.out_channels, "Conv2d's out_channels")
        _whole(self.kernel_size, "Conv2d's kernel_size")
        _whole(self.stride, "Conv2d's stride")
        _whole(self.padding, "Conv2d's padding", 0)

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return (self.out_channels, *_window(self, node, shapes[0], self.kernel_size, self.stride, self.padding))

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        k = self.kernel_size
        out = [("weight", (self.out_channels, shapes[0][0], k, k), "conv")]
        return out + ([("bias", (self.out_channels,), "bias")] if self.bias else [])


@dataclass(frozen=True)
class Dense(Layer):
    """``out_features`` None: as many as the data has classes (the zoo's last layer)."""

    kind: ClassVar[str] = "fc"
    out_features: Optional[int] = None
    bias: bool = True

    def __post_init__(self) -> None:
        if self.out_features is not None:
            _whole(self.out_features, "Dense's out_features")

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if len(shapes[0]) != 1:
            raise MultidevError(f"{self.where(node)} gets images {shapes[0]}: put Flatten or GlobalAvgPool "
                                f"before it")
        if self.out_features is None:
            raise MultidevError(f"{self.where(node)} has no out_features: give one, or end the model with it "
                                f"so that the data's class count fills it in")
        return (self.out_features,)

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        out = [("weight", (self.out_features, shapes[0][0]), "dense")]
        return out + ([("bias", (self.out_features,), "bias")] if self.bias else [])


@dataclass(frozen=True)
class BatchNorm(Layer):
    """Per-channel statistics over the batch (and H, W): local or sync by the run's ``batchnorm`` setting."""

    kind: ClassVar[str] = "bn"

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        c = (shapes[0][0],)
        return [("gamma", c, "gamma"), ("beta", c, "beta"), ("running_mean", c, "mean"), ("running_var", c, "var")]


@dataclass(frozen=True)
class LayerNorm(Layer):
    """Each sample normalised over all its values; a scale and shift per channel (or feature)."""

    kind: ClassVar[str] = "ln"

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        c = (shapes[0][0],)
        return [("gamma", c, "gamma"), ("beta", c, "beta")]


@dataclass(frozen=True)
class ReLU(Layer):
    kind: ClassVar[str] = "relu"


@dataclass(frozen=True)
class GELU(Layer):
    """The exact (erf) form, as torch's and ONNX's default."""

    kind: ClassVar[str] = "gelu"


@dataclass(frozen=True)
class Tanh(Layer):
    kind: ClassVar[str] = "tanh"


@dataclass(frozen=True)
class Sigmoid(Layer):
    kind: ClassVar[str] = "sigmoid"


@dataclass(frozen=True)
class MaxPool2d(Layer):
    """A k x k window every ``stride`` (default k) pixels, no padding."""

    kind: ClassVar[str] = "maxpool"
    kernel_size: int
    stride: Optional[int] = None

    def __post_init__(self) -> None:
        _whole(self.kernel_size, f"{type(self).__name__}'s kernel_size")
        if self.stride is not None:
            _whole(self.stride, f"{type(self).__name__}'s stride")

    @property
    def step(self) -> int:
        return self.stride or self.kernel_size

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return (shapes[0][0], *_window(self, node, shapes[0], self.kernel_size, self.step))


@dataclass(frozen=True)
class AvgPool2d(MaxPool2d):
    kind: ClassVar[str] = "avgpool"


@dataclass(frozen=True)
class GlobalAvgPool(Layer):
    """The mean of each channel over H and W: images (C, H, W) to features (C,)."""

    kind: ClassVar[str] = "gap"

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return (_image(self, node, shapes[0])[0],)


@dataclass(frozen=True)
class Flatten(Layer):
    """Images (C, H, W) to features (C * H * W,), in C, H, W order; features pass as they are."""

    kind: ClassVar[str] = "flatten"

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return (math.prod(shapes[0]),)


@dataclass(frozen=True)
class Dropout(Layer):
    """Zeroes a fraction ``p`` of the values in training and scales the rest by 1 / (1 - p); nothing in inference."""

    kind: ClassVar[str] = "dropout"
    p: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0 <= self.p < 1:
            raise MultidevError(f"Dropout's rate must be in [0, 1), got {self.p!r}")


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


LAYERS: dict[str, type[Layer]] = {cls.__name__: cls for cls in (
    Conv2d, Dense, BatchNorm, LayerNorm, ReLU, GELU, Tanh, Sigmoid, MaxPool2d, AvgPool2d, GlobalAvgPool, Flatten,
    Dropout, Add, Concat)}
