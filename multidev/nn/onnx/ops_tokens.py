"""A ViT's learned tokens: the class token (Expand of a (1, 1, D) initializer to the batch, then a Concat before
the tokens) and the position embedding (Add of a (1, L, D) initializer to the tokens)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import ClassToken, PositionEmbedding
from multidev.nn.onnx.base import bad, rank, reads, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader, Value
from multidev.nn.onnx.writer import Writer


@reads("Expand", note="of a learned (1, 1, D) to the batch, a class token")
def _expand(r: Reader, node, attrs: dict) -> None:
    """torch's class_token.expand(n, -1, -1) where the batch n is dynamic (a fixed one is folded): kept as the
    token itself until the Concat that puts it before the tokens."""
    token, target = r.const(node, 0, "value"), r.known(node.input[1])
    sizes = [] if target is None else target.reshape(-1).tolist()
    if token.ndim != 3 or token.shape[:2] != (1, 1) or len(sizes) != 3 or sizes[0] not in ("N", r.batch) \
            or sizes[1] != 1 or sizes[2] not in (1, token.shape[2]):
        raise bad(node, f"expands a constant of shape {token.shape} to {sizes or 'a computed shape'}: multidev.nn "
                        f"expands only a learned (1, 1, D) to (N, 1, D), a class token")
    r.tokens[node.output[0]] = token
    r.origin[node.output[0]] = r.named(node.input[0])


def _token(r: Reader, name: str) -> Optional[np.ndarray]:
    """The (1, 1, D) token of an expanded (or folded: (batch, 1, D), each row alike) class token, else None."""
    if name in r.tokens:
        return r.tokens[name]
    value = r.consts.get(name)
    if value is None or value.ndim != 3 or value.shape[1] != 1 or value.dtype.kind != "f" \
            or not np.all(value == value[:1]):
        return None
    return value[:1]


def class_token(r: Reader, node, attrs: dict) -> bool:
    """Concat(token, tokens) along the tokens' axis as ClassToken; False where the first input is no token."""
    token = _token(r, node.input[0]) if len(node.input) == 2 else None
    if token is None:
        return False
    x = r.value(node, 1)
    if rank(x[1]) != 3 or int(attrs.get("axis", 1)) % 3 != 1 or x[1] == "gap":
        raise bad(node, f"puts a learned {token.shape} value before values of rank {rank(x[1])} along axis "
                        f"{attrs.get('axis')}: multidev.nn's ClassToken puts one before tokens (N, L, D), axis 1")
    params = r.weights(node, {"token": token.reshape(-1)})
    r.emit(node, ClassToken(), [x], x[1], hint(node, "cls", r.named(node.input[0])), params)
    return True


def position(r: Reader, node, x: Value, name: str) -> bool:
    """Add of a learned (1, L, D) (or (L, D)) to tokens (N, L, D) as PositionEmbedding; False where not one."""
    value = r.consts[name]
    shape = r.shape(x)
    if rank(x[1]) != 3 or value.ndim not in (2, 3) or value.ndim == 3 and value.shape[0] != 1 \
            or shape is not None and tuple(value.shape[-2:]) != shape:
        return False
    params = r.weights(node, {"embedding": value.reshape(value.shape[-2:])})
    r.emit(node, PositionEmbedding(), [x], x[1], hint(node, "pos", r.named(name)), params)
    return True


@writes(ClassToken)
def _w_class_token(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """As torch writes it for a dynamic batch: the token (1, 1, D) expanded to (N, 1, D), then put first."""
    d, p = w.shapes[n.name][-1], n.name + "/"
    token = w.init(n, "token", w.state[f"{n.name}.token"].reshape(1, 1, d))
    w.add("Shape", ins, p + "shape", p + "Shape")
    w.add("Gather", [p + "shape", w.ints(p + "batch_axis", [0])], p + "batch", p + "Gather", axis=0)
    w.add("Concat", [p + "batch", w.ints(p + "token_shape", [1, d])], p + "expanded", p + "Concat_shape", axis=0)
    w.add("Expand", [token, p + "expanded"], p + "tokens", p + "Expand")
    w.add("Concat", [p + "tokens"] + ins, out, n.name, axis=1)


@writes(PositionEmbedding)
def _w_position(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    embedding = w.state[f"{n.name}.embedding"]
    w.add("Add", ins + [w.init(n, "embedding", embedding.reshape((1,) + embedding.shape))], out, n.name)
