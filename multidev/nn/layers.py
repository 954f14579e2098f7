"""The layers of the model language: hyperparameters only, each stating its output size, never its input's.

A layer is a frozen value. It knows the shape it gives for the shapes it
gets (:meth:`Layer.infer`, one line naming the layer when they do not fit)
and the parameters it holds for them (:meth:`Layer.params`, canonical roles
that decide the initial values). Shapes leave out the batch: ``(C, H, W)``
for images (the core's NCHW layout), ``(F,)`` for feature vectors.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar, Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn import windows as W
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
        """The hyperparameters, as a definition stores them: those at their default left out, so a definition
        that uses nothing new reads in a multidev that predates a new hyperparameter."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "name" and (f.default is MISSING or getattr(self, f.name) != f.default)}


def _image(layer: Layer, node: str, shape: Shape) -> Shape:
    if len(shape) != 3:
        raise MultidevError(f"{layer.where(node)} needs images (C, H, W) but gets features {shape}: "
                            f"give it image data, or drop it from a model of feature vectors")
    return shape


def _whole(value: object, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MultidevError(f"{what} must be a whole number of at least {minimum}, got {value!r}")
    return value


def _window(layer: Layer, node: str, shape: Shape, k: int, stride: int, padding: W.Padding = 0,
            dilation: int = 1, ceil_mode: bool = False) -> tuple[int, int]:
    """The output's (rows, columns); a window that does not fit is one line naming the layer."""
    c, h, w = _image(layer, node, shape)
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
        _whole(self.out_channels, "Conv2d's out_channels")
        _whole(self.kernel_size, "Conv2d's kernel_size")
        _whole(self.stride, "Conv2d's stride")
        _whole(self.groups, "Conv2d's groups")
        _whole(self.dilation, "Conv2d's dilation")
        object.__setattr__(self, "padding", W.padding_value(self.padding, "Conv2d's padding"))
        if self.out_channels % self.groups:
            raise MultidevError(f"Conv2d's out_channels {self.out_channels} is not a multiple of its groups "
                                f"{self.groups}: every group needs as many filters")

    def sides(self, shape: Shape) -> W.Sides:
        """The zeros added (top, bottom, left, right) for an input of ``shape`` (C, H, W)."""
        return W.sides(self.padding, shape[1:], self.kernel_size, self.stride, self.dilation)

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        cin = _image(self, node, shapes[0])[0]
        if cin % self.groups:
            raise MultidevError(f"{self.where(node)} splits {cin} input channels into {self.groups} groups: make "
                                f"the channels a multiple of the groups")
        return (self.out_channels, *_window(self, node, shapes[0], self.kernel_size, self.stride, self.padding,
                                            self.dilation))

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        k = self.kernel_size
        out = [("weight", (self.out_channels, shapes[0][0] // self.groups, k, k), "conv")]
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


def _fraction(value: object, what: str, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
        raise MultidevError(f"{what} must be a number between {low:g} and {high:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class BatchNorm(Layer):
    """Per-channel statistics over the batch (and H, W): local or sync by the run's ``batchnorm`` setting.

    ``eps`` inside the square root; ``momentum``: running = (1 - momentum) * running + momentum * batch
    statistic, torch's convention (Keras' and Flax's momentum is 1 - this one).
    """

    kind: ClassVar[str] = "bn"
    eps: float = 1e-5
    momentum: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps", _fraction(self.eps, "BatchNorm's eps"))
        object.__setattr__(self, "momentum", _fraction(self.momentum, "BatchNorm's momentum", 0.0, 1.0 + 1e-12))

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        c = (shapes[0][0],)
        return [("gamma", c, "gamma"), ("beta", c, "beta"), ("running_mean", c, "mean"), ("running_var", c, "var")]


@dataclass(frozen=True)
class LayerNorm(Layer):
    """Each sample normalised over all its values; a scale and shift per channel (or feature)."""

    kind: ClassVar[str] = "ln"
    eps: float = LN_EPS

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps", _fraction(self.eps, "LayerNorm's eps"))

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        c = (shapes[0][0],)
        return [("gamma", c, "gamma"), ("beta", c, "beta")]


@dataclass(frozen=True)
class ReLU(Layer):
    kind: ClassVar[str] = "relu"


@dataclass(frozen=True)
class GELU(Layer):
    """x * Phi(x): ``approximate="none"`` the exact erf form (torch's and ONNX's default), ``"tanh"`` the tanh
    form (Flax's default, GPT-2's)."""

    kind: ClassVar[str] = "gelu"
    approximate: str = "none"

    def __post_init__(self) -> None:
        if self.approximate not in ("none", "tanh"):
            raise MultidevError(f"GELU's approximate is {self.approximate!r}: choose 'none' (erf) or 'tanh'")


@dataclass(frozen=True)
class ReLU6(Layer):
    """min(max(x, 0), 6): MobileNetV2's activation (ONNX Clip(0, 6))."""

    kind: ClassVar[str] = "relu6"


@dataclass(frozen=True)
class LeakyReLU(Layer):
    """x where x > 0, else ``negative_slope`` * x."""

    kind: ClassVar[str] = "lrelu"
    negative_slope: float = 0.01

    def __post_init__(self) -> None:
        if isinstance(self.negative_slope, bool) or not isinstance(self.negative_slope, (int, float)):
            raise MultidevError(f"LeakyReLU's negative_slope must be a number, got {self.negative_slope!r}")
        object.__setattr__(self, "negative_slope", float(self.negative_slope))


@dataclass(frozen=True)
class SiLU(Layer):
    """x * sigmoid(x) (Swish): EfficientNet's activation."""

    kind: ClassVar[str] = "silu"


@dataclass(frozen=True)
class HardSigmoid(Layer):
    """min(max(x / 6 + 1/2, 0), 1): torch's Hardsigmoid (ONNX HardSigmoid with alpha 1/6)."""

    kind: ClassVar[str] = "hsigmoid"


@dataclass(frozen=True)
class HardSwish(Layer):
    """x * HardSigmoid(x): MobileNetV3's activation."""

    kind: ClassVar[str] = "hswish"


@dataclass(frozen=True)
class Tanh(Layer):
    kind: ClassVar[str] = "tanh"


@dataclass(frozen=True)
class Sigmoid(Layer):
    kind: ClassVar[str] = "sigmoid"


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
        _whole(self.kernel_size, f"{type(self).__name__}'s kernel_size")
        if self.stride is not None:
            _whole(self.stride, f"{type(self).__name__}'s stride")
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
        return (shapes[0][0], *_window(self, node, shapes[0], self.kernel_size, self.step, self.padding, 1,
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
        c = _image(self, node, shapes[0])[0]
        return (c, 1, 1) if self.keepdims else (c,)


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


LAYERS: dict[str, type[Layer]] = {cls.__name__: cls for cls in (
    Conv2d, Dense, BatchNorm, LayerNorm, ReLU, GELU, Tanh, Sigmoid, ReLU6, LeakyReLU, SiLU, HardSigmoid, HardSwish,
    MaxPool2d, AvgPool2d, GlobalAvgPool, Flatten, Dropout, Add, Mul, Concat)}
