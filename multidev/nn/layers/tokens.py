"""Layers of token sequences (L, D): a Vision Transformer's class token, position embedding and attention, and
Swin's attention within shifted windows of a grid of tokens (H, W, C).

Their weights follow torch's layout, so a ViT trained here loads into torch's
modules by name and shape: the attention's ``in_weight`` stacks the query,
key and value projections' rows (torch's ``in_proj_weight``), and the
queries are scaled by 1 / sqrt(head size) before they meet the keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from multidev.errors import MultidevError
from multidev.nn import swin
from multidev.nn.layers.base import Layer, Shape, whole


def tokens(layer: Layer, node: str, shape: Shape) -> Shape:
    if len(shape) != 2:
        raise MultidevError(f"{layer.where(node)} needs tokens (L, D) but gets {shape}: Reshape and Transpose "
                            f"images (D, H, W) to (H * W, D) first")
    return shape


def heads_fit(layer: Layer, node: str, features: int, heads: int) -> None:
    """One line where an attention's ``features`` do not split into its ``heads``."""
    if features % heads:
        raise MultidevError(f"{layer.where(node)} splits {features} features into {heads} heads: make the "
                            f"features a multiple of the heads")


def projections(d: int, bias: bool) -> list[tuple[str, Shape, str]]:
    """An attention's weights in torch's layout: the stacked query, key and value rows, then the output's."""
    out = [("in_weight", (3 * d, d), "dense")] + ([("in_bias", (3 * d,), "bias")] if bias else [])
    return out + [("out_weight", (d, d), "dense")] + ([("out_bias", (d,), "bias")] if bias else [])


@dataclass(frozen=True)
class ClassToken(Layer):
    """A learned vector put before the tokens, (L, D) to (L + 1, D): what the classifier head reads at the end."""

    kind: ClassVar[str] = "cls"

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        n, d = tokens(self, node, shapes[0])
        return (n + 1, d)

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        return [("token", (shapes[0][-1],), "token")]


@dataclass(frozen=True)
class PositionEmbedding(Layer):
    """A learned (L, D) added to the tokens: where each token sits."""

    kind: ClassVar[str] = "pos"

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        return tokens(self, node, shapes[0])

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        return [("embedding", shapes[0], "position")]


@dataclass(frozen=True)
class MultiHeadAttention(Layer):
    """Self-attention of ``heads`` heads over tokens (L, D), D a multiple of ``heads``.

    q, k, v = x in_weight[:D]^T, [D:2D], [2D:] (plus ``in_bias``); per head of
    size d = D / heads, softmax(q k^T / sqrt(d)) v over the keys; the heads
    side by side times ``out_weight``^T (plus ``out_bias``): torch's
    ``nn.MultiheadAttention(D, heads, batch_first=True)`` without dropout.
    """

    kind: ClassVar[str] = "attn"
    heads: int
    bias: bool = True

    def __post_init__(self) -> None:
        whole(self.heads, "MultiHeadAttention's heads")

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        _, d = tokens(self, node, shapes[0])
        heads_fit(self, node, d, self.heads)
        return shapes[0]

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        return projections(shapes[0][-1], self.bias)


@dataclass(frozen=True)
class WindowAttention(Layer):
    """Swin's self-attention within windows of ``window`` x ``window`` tokens of a grid (H, W, C), the windows
    rolled by ``shift`` (``multidev.nn.swin`` states the padding, roll and mask).

    Within a window, as :class:`MultiHeadAttention` (its weights and names),
    plus a learned ``table`` ((2 window - 1)^2, heads): the bias of each head
    for each relative offset of a query and a key; torchvision's
    ``ShiftedWindowAttention`` without dropout.
    """

    kind: ClassVar[str] = "wattn"
    heads: int
    window: int
    shift: int = 0
    bias: bool = True

    def __post_init__(self) -> None:
        whole(self.heads, "WindowAttention's heads")
        whole(self.window, "WindowAttention's window")
        if isinstance(self.shift, bool) or not isinstance(self.shift, int) or not 0 <= self.shift < self.window:
            raise MultidevError(f"WindowAttention's shift must be a whole number from 0 to window - 1 "
                                f"({self.window - 1}), got {self.shift!r}")

    def infer(self, node: str, shapes: list[Shape]) -> Shape:
        if len(shapes[0]) != 3:
            raise MultidevError(f"{self.where(node)} needs a grid of tokens (H, W, C) but gets {shapes[0]}: "
                                f"Transpose images (C, H, W) to (H, W, C) first")
        heads_fit(self, node, shapes[0][-1], self.heads)
        return shapes[0]

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        table = ("table", (swin.table_size(self.window), self.heads), "position")
        return projections(shapes[0][-1], self.bias) + [table]
