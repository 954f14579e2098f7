"""Layers of token sequences (L, D): a Vision Transformer's class token, position embedding and attention.

Their weights follow torch's layout, so a ViT trained here loads into torch's
modules by name and shape: the attention's ``in_weight`` stacks the query,
key and value projections' rows (torch's ``in_proj_weight``), and the
queries are scaled by 1 / sqrt(head size) before they meet the keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from multidev.errors import MultidevError
from multidev.nn.layers.base import Layer, Shape, whole


def tokens(layer: Layer, node: str, shape: Shape) -> Shape:
    if len(shape) != 2:
        raise MultidevError(f"{layer.where(node)} needs tokens (L, D) but gets {shape}: Reshape and Transpose "
                            f"images (D, H, W) to (H * W, D) first")
    return shape


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
        if d % self.heads:
            raise MultidevError(f"{self.where(node)} splits {d} features into {self.heads} heads: make the "
                                f"features a multiple of the heads")
        return shapes[0]

    def params(self, shapes: list[Shape]) -> list[tuple[str, Shape, str]]:
        d = shapes[0][-1]
        out = [("in_weight", (3 * d, d), "dense")] + ([("in_bias", (3 * d,), "bias")] if self.bias else [])
        return out + [("out_weight", (d, d), "dense")] + ([("out_bias", (d,), "bias")] if self.bias else [])
