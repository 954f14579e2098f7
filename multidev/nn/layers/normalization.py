"""BatchNorm (statistics over the batch, local or sync) and LayerNorm (each sample alone)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from multidev.errors import MultidevError
from multidev.nn.layers.base import LN_EPS, Layer, Shape, fraction, whole


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
    """``last`` None: each sample normalised over all its values, a scale and shift per channel (or feature);
    ``last`` k: over its last k axes, a scale and shift per value of those (torch's ``LayerNorm(shape[-k:])``, a
    transformer's ``last=1``). ``affine=False``: no scale and shift."""

    kind: ClassVar[str] = "ln"
    eps: float = LN_EPS
    last: Optional[int] = None
    affine: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps", fraction(self.eps, "LayerNorm's eps"))
        if self.last is not None:
            whole(self.last, "LayerNorm's last")

    def axes(self, shape: Shape) -> tuple[int, ...]:
        """The sample's axes the statistics run over (the batch left out)."""
        return tuple(range(len(shape) - (self.last or len(shape)), len(shape)))

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if self.last is not None and self.last > len(shapes[0]):
            raise MultidevError(f"{self.where(node)} normalises the last {self.last} axes of {shapes[0]}, which "
                                f"has {len(shapes[0])}")
        return shapes[0]

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        if not self.affine:
            return []
        c = (shapes[0][0],) if self.last is None else shapes[0][-self.last:]
        return [("gamma", c, "gamma"), ("beta", c, "beta")]
