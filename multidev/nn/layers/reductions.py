"""Reductions of a sample over some of its axes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from multidev.errors import MultidevError
from multidev.nn.layers.base import Layer, Shape, sample_axis


@dataclass(frozen=True)
class Mean(Layer):
    """The mean over ``axes`` of the sample (the batch left out; negative from the end), those axes kept as 1s with
    ``keepdims``: a token sequence's mean token (``Mean((0,))``), an image's channel mean. An image's mean over H and
    W is GlobalAvgPool."""

    kind: ClassVar[str] = "mean"
    axes: tuple[int, ...]
    keepdims: bool = False

    def __post_init__(self) -> None:
        axes = tuple(self.axes) if isinstance(self.axes, (list, tuple)) else None
        if not axes or not all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
            raise MultidevError(f"Mean's axes must be a tuple of whole numbers, got {self.axes!r}")
        object.__setattr__(self, "axes", axes)

    def resolved(self, node: str, rank: int) -> tuple[int, ...]:
        """The axes counted from the sample's first, each once."""
        out = sorted({sample_axis(self, node, a, rank) for a in self.axes})
        if len(out) != len(self.axes):
            raise MultidevError(f"{self.where(node)} names an axis twice in {self.axes}")
        return tuple(out)

    def batched(self, rank: int) -> tuple[int, ...]:
        """The axes of a batch of samples of ``rank`` axes (one past the sample's: the batch first), as engines
        and the reference reduce them; the definition was checked when its shapes were inferred."""
        return tuple(a + 1 for a in self.resolved(self.kind, rank))

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        axes = self.resolved(node, len(shapes[0]))
        if self.keepdims:
            return tuple(1 if k in axes else n for k, n in enumerate(shapes[0]))
        out = tuple(n for k, n in enumerate(shapes[0]) if k not in axes)
        if not out:
            raise MultidevError(f"{self.where(node)} averages every axis of {shapes[0]}: keep one (keepdims=True)")
        return out
