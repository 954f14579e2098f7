"""Elementwise activations, each as torch's layer of the same name computes it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from multidev.errors import MultidevError
from multidev.nn.layers.base import Layer, Shape, sample_axis


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
class Softmax(Layer):
    """exp(x) / sum(exp(x)) along ``axis`` of the sample (-1: the last, attention's keys)."""

    kind: ClassVar[str] = "softmax"
    axis: int = -1

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        sample_axis(self, node, self.axis, len(shapes[0]))
        return shapes[0]


@dataclass(frozen=True)
class Scale(Layer):
    """x times a constant ``factor``: attention's 1 / sqrt(d) where a graph writes it out."""

    kind: ClassVar[str] = "scale"
    factor: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not math.isfinite(self.factor):
            raise MultidevError(f"Scale's factor must be a finite number, got {self.factor!r}")
        object.__setattr__(self, "factor", float(self.factor))
