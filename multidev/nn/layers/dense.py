"""The fully connected layer, and Dropout, which the core's masks drive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from multidev.errors import MultidevError
from multidev.nn.layers.base import Layer, Shape, whole


@dataclass(frozen=True)
class Dense(Layer):
    """A matrix product with the last axis of any rank (features (F,), tokens (L, D), a grid of tokens (H, W, C));
    ``out_features`` None: as many as the data has classes (the zoo's last layer)."""

    kind: ClassVar[str] = "fc"
    out_features: Optional[int] = None
    bias: bool = True

    def __post_init__(self) -> None:
        if self.out_features is not None:
            whole(self.out_features, "Dense's out_features")

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if self.out_features is None:
            raise MultidevError(f"{self.where(node)} has no out_features: give one, or end the model with it "
                                f"so that the data's class count fills it in")
        return shapes[0][:-1] + (self.out_features,)

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        out = [("weight", (self.out_features, shapes[0][-1]), "dense")]
        return out + ([("bias", (self.out_features,), "bias")] if self.bias else [])


@dataclass(frozen=True)
class Dropout(Layer):
    """Zeroes a fraction ``p`` of the values in training and scales the rest by 1 / (1 - p); nothing in inference."""

    kind: ClassVar[str] = "dropout"
    p: float = 0.5

    def mask_shape(self, shape: Shape) -> Shape:
        """The shape of one sample's mask for values of ``shape``: one multiplier per value."""
        return shape

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0 <= self.p < 1:
            raise MultidevError(f"Dropout's rate must be in [0, 1), got {self.p!r}")


@dataclass(frozen=True)
class DropPath(Dropout):
    """Stochastic depth: a whole sample's values zeroed at rate ``p`` (the rest scaled by 1 / (1 - p)), one draw
    per sample; the core draws its masks as it draws Dropout's."""

    kind: ClassVar[str] = "droppath"

    def mask_shape(self, shape: Shape) -> Shape:
        return (1,) * len(shape)
