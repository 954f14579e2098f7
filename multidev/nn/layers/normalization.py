"""BatchNorm (statistics over the batch, local or sync) and LayerNorm (each sample alone)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from multidev.nn.layers.base import LN_EPS, Layer, Shape, fraction


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
        object.__setattr__(self, "eps", fraction(self.eps, "BatchNorm's eps"))
        object.__setattr__(self, "momentum", fraction(self.momentum, "BatchNorm's momentum", 0.0, 1.0 + 1e-12))

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        c = (shapes[0][0],)
        return [("gamma", c, "gamma"), ("beta", c, "beta"), ("running_mean", c, "mean"), ("running_var", c, "var")]


@dataclass(frozen=True)
class LayerNorm(Layer):
    """Each sample normalised over all its values; a scale and shift per channel (or feature)."""

    kind: ClassVar[str] = "ln"
    eps: float = LN_EPS

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps", fraction(self.eps, "LayerNorm's eps"))

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        c = (shapes[0][0],)
        return [("gamma", c, "gamma"), ("beta", c, "beta")]
