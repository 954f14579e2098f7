"""What every part of ONNX in and out shares: the optional onnx package, one-line errors, number reading, and the
registries of readers (one per ONNX op) and writers (one per layer) that the op modules fill.

Why registries: each op's reader sits beside the writer of the layers it
gives, in a module of a few related ops, and ``SUPPORTED`` (what an error
lists) is derived from what is registered, so it cannot drift from the code.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Union

import numpy as np

from multidev.errors import MultidevError

#: opsets read: BatchNormalization lost ``spatial`` in 9; newer ones are checked by onnx.checker
MIN_OPSET = 9
#: opsets written: Clip's bounds are inputs from 11, Dropout's ratio from 12; Sum and the rest are stable from 13
MIN_WRITE_OPSET = 13
DEFAULT_OPSET = 17  # LayerNormalization's first opset; GELU is written as Gelu from opset 20
FLOATS = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
#: ONNX's rank of each kind of value the reader tracks: images, features, and "gap", ONNX's (N, C, 1, 1) that
#: multidev's GlobalAvgPool gives as (N, C) where only a Flatten reads it; any other rank R is the kind "rR"
RANK = {"img": 4, "feat": 2, "gap": 4}
#: ONNX's "to the end" in Slice's ends (INT64_MAX, as torch writes x[a:])
TO_END = 2 ** 62

Ref = Union[int, str]  # a layer's index while reading, or "input"
ReadFn = Callable[..., None]  # (reader, node, attributes)
WriteFn = Callable[..., None]  # (writer, node spec, input names, output name)

READERS: dict[str, ReadFn] = {}
MULTI: set[str] = set()  # ops whose reader gives every output (Split), not only the first
WRITERS: dict[type, WriteFn] = {}
NOTES: dict[str, str] = {}  # op -> what SUPPORTED says of it beside its name
#: ops read by no reader, with why: what the error says before it lists the supported ops
WHY_NOT = {"Where": "it has no layer that picks between computed values",
           "ScatterND": "it has no layer that writes into part of a value"}
PATTERNS: list[Callable[..., None]] = []  # run before the pass: several nodes that make one layer
FIRST: dict[str, list[Callable[..., bool]]] = {}  # op -> finders of a layer that starts at such a node


def rank(kind: str) -> int:
    """ONNX's rank of a value of ``kind``, the batch axis included."""
    return RANK.get(kind) or int(kind[1:])


def kind(rank_: int) -> str:
    """The kind of a value of ONNX rank ``rank_``: "img" (4), "feat" (2), else "r3", "r5"..."""
    return {4: "img", 2: "feat"}.get(rank_, f"r{rank_}")


def reads(*ops: str, note: str = "", outputs: bool = False) -> Callable[[ReadFn], ReadFn]:
    """Registers a reader of ``ops``; ``note`` (the forms it reads) goes into ``SUPPORTED`` beside the first;
    ``outputs``: the reader gives every output of its node (Split), so they may be read."""
    def register(fn: ReadFn) -> ReadFn:
        for op in ops:
            READERS[op] = fn
            if outputs:
                MULTI.add(op)
        if note:
            NOTES[ops[0]] = note
        return fn
    return register


def writes(*layers: type) -> Callable[[WriteFn], WriteFn]:
    def register(fn: WriteFn) -> WriteFn:
        for layer in layers:
            WRITERS[layer] = fn
        return fn
    return register


def pattern(fn: Callable[..., None]) -> Callable[..., None]:
    """Registers a finder of several nodes that make one layer (GELU's erf form, x * sigmoid(x))."""
    PATTERNS.append(fn)
    return fn


def starts(*ops: str) -> Callable[[Callable[..., bool]], Callable[..., bool]]:
    """Registers a finder tried before the reader of ``ops``: (reader, node) -> whether it read the node as the
    start of a layer of many nodes (torch's attention starts at a Transpose or a MatMul)."""
    def register(fn: Callable[..., bool]) -> Callable[..., bool]:
        for op in ops:
            FIRST.setdefault(op, []).append(fn)
        return fn
    return register


def supported() -> str:
    """The ops read, as an error lists them: each with its note."""
    return ", ".join(op + (f" ({NOTES[op]})" if op in NOTES else "") for op in sorted(READERS))


def onnx_module():
    """The onnx package, or one line saying how to install it (it is optional)."""
    try:
        import onnx
        import onnx.checker
        import onnx.helper
        import onnx.numpy_helper
        import onnx.shape_inference
    except ImportError:
        raise MultidevError("ONNX needs the onnx package: pip install 'multidev[onnx]' (or pip install onnx)") \
            from None
    return onnx


def where(node) -> str:
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
    return f"ONNX node '{node.name or node.output[0]}' (op {op})"


def bad(node, what: str) -> MultidevError:
    return MultidevError(f"{where(node)} {what}")


def scalar(value: Optional[np.ndarray], target: float) -> bool:
    """Whether ``value`` is one number close to ``target`` (float32 close: attributes and constants are float32)."""
    return value is not None and value.size == 1 and math.isclose(float(value.reshape(-1)[0]), target, rel_tol=1e-6)


def ints(values, n: int, default: int) -> list[int]:
    return [int(v) for v in values] if values is not None else [default] * n


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def decimal(value: float) -> float:
    """A float32 attribute as the decimal it was written from: 0.2, not 0.20000000298023224."""
    return float(str(np.float32(value)))


def complement(value: float) -> float:
    """1 - ``value`` for a float32 ``value``, as the shortest decimal that gives it back (ONNX's BatchNorm momentum
    0.9 is torch's 0.1, not 0.10000002384185791)."""
    for digits in range(1, 10):
        out = round(1.0 - float(value), digits)
        if np.float32(1.0 - out) == np.float32(value):
            return out
    return 1.0 - float(value)
