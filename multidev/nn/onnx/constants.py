"""Constant folding: the ONNX nodes whose inputs are all known, computed with NumPy while reading.

Why: torch's exporter writes a shape (``x.view(n, 2, c // 2, h, w)``,
``x.chunk(2, 1)``'s split point, ``class_token.expand(n, -1, -1)``) as a
chain of Shape, Gather, Unsqueeze, Concat, Add, Div... nodes; folded, a
Reshape, Slice or Expand reads one constant. Shape values may hold the
batch, "N" where the file's batch axis is dynamic, and "?" for a size
nobody knows: arithmetic on those gives "?", and a value with neither is an
ordinary int64 constant again. Only the ops below are folded (NumPy, each a
few lines, the same for every opset read); any other op goes to its reader.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import numpy as np

Fold = Callable[[list[np.ndarray], dict, int], np.ndarray]
FOLDS: dict[str, Fold] = {}
#: ops that only move a value around: a weight folded through them keeps its initializer's name (an Identity's
#: output has a name of its own: torch writes one initializer once and names its copies so)
MOVES = {"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Cast", "Expand"}


def folds(*ops: str) -> Callable[[Fold], Fold]:
    def register(fn: Fold) -> Fold:
        for op in ops:
            FOLDS[op] = fn
        return fn
    return register


def symbolic(value: np.ndarray) -> bool:
    """Whether a shape value holds the batch "N" or an unknown "?"."""
    return value.dtype == object and any(isinstance(v, str) for v in value.reshape(-1))


def settled(value: np.ndarray) -> np.ndarray:
    """An object array of whole numbers alone as the int64 constant it is."""
    return value.astype(np.int64) if value.dtype == object and not symbolic(value) else value


def _axes(ins: list[np.ndarray], attrs: dict, k: int = 1) -> Optional[list[int]]:
    """Axes given as an attribute (below opset 13) or as input ``k`` (from 13)."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    return [int(a) for a in ins[k].reshape(-1)] if len(ins) > k and ins[k] is not None else None


@folds("Identity")
def _identity(ins, attrs, opset):
    return ins[0]


@folds("Cast")
def _cast(ins, attrs, opset):
    if symbolic(ins[0]):
        return ins[0]
    import onnx.helper  # the dtype table; only reached while reading ONNX

    return ins[0].astype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))


@folds("Transpose")
def _transpose(ins, attrs, opset):
    return np.transpose(ins[0], [int(p) for p in attrs["perm"]] if "perm" in attrs else None)


@folds("Unsqueeze")
def _unsqueeze(ins, attrs, opset):
    x, axes = ins[0], _axes(ins, attrs) or []
    for axis in sorted(a % (x.ndim + len(axes)) for a in axes):
        x = np.expand_dims(x, axis)
    return x


@folds("Squeeze")
def _squeeze(ins, attrs, opset):
    axes = _axes(ins, attrs)
    return np.squeeze(ins[0], axis=tuple(axes) if axes else None)


@folds("Concat")
def _concat(ins, attrs, opset):
    arrays = [np.asarray(v, dtype=object) if any(a.dtype == object for a in ins) else v for v in ins]
    return np.concatenate(arrays, axis=int(attrs.get("axis", 0)))


@folds("Gather")
def _gather(ins, attrs, opset):
    return np.take(ins[0], ins[1].astype(np.int64), axis=int(attrs.get("axis", 0)))


def _starts(ins: list[np.ndarray], attrs: dict, opset: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """(starts, ends, axes, steps) of a Slice: attributes below opset 10, inputs from 10."""
    if opset < 10:
        starts, ends = [int(v) for v in attrs["starts"]], [int(v) for v in attrs["ends"]]
        axes = [int(a) for a in attrs.get("axes", range(len(starts)))]
        return starts, ends, axes, [1] * len(starts)
    starts, ends = [int(v) for v in ins[1].reshape(-1)], [int(v) for v in ins[2].reshape(-1)]
    given = [ins[k] if len(ins) > k else None for k in (3, 4)]
    axes = [int(a) for a in given[0].reshape(-1)] if given[0] is not None else list(range(len(starts)))
    steps = [int(s) for s in given[1].reshape(-1)] if given[1] is not None else [1] * len(starts)
    return starts, ends, axes, steps


@folds("Slice")
def _slice(ins, attrs, opset):
    x = ins[0]
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(*_starts(ins, attrs, opset)):
        index[axis % x.ndim] = slice(start, end, step)
    return x[tuple(index)]


@folds("Reshape")
def _reshape(ins, attrs, opset):
    x, shape = ins[0], [int(v) for v in ins[1].reshape(-1)]
    if not int(attrs.get("allowzero", 0)):
        shape = [x.shape[k] if v == 0 else v for k, v in enumerate(shape)]
    return x.reshape(shape)


@folds("Shape")
def _shape(ins, attrs, opset):
    return np.array(ins[0].shape[int(attrs.get("start", 0)):attrs.get("end")], np.int64)


@folds("Size")
def _size(ins, attrs, opset):
    return np.array(ins[0].size, np.int64)


@folds("ConstantOfShape")
def _constant_of_shape(ins, attrs, opset):
    import onnx.numpy_helper

    value = onnx.numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
    return np.full([int(v) for v in ins[0].reshape(-1)], value.reshape(-1)[0], value.dtype)


@folds("Expand")
def _expand(ins, attrs, opset):
    shape = np.broadcast_shapes(ins[0].shape, tuple(int(v) for v in ins[1].reshape(-1)))
    return np.broadcast_to(ins[0], shape).copy()


@folds("Range")
def _range(ins, attrs, opset):
    start, limit, delta = (v.reshape(-1)[0] for v in ins)
    return np.arange(start, limit, delta, dtype=ins[0].dtype)


def _divide(a: Any, b: Any) -> Any:
    """ONNX's Div: integers truncate towards zero (C's), floats divide."""
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        q = abs(int(a)) // abs(int(b))
        return q if (a < 0) == (b < 0) else -q
    return a / b


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": _divide, "Pow": operator.pow,
    "Equal": operator.eq, "Less": operator.lt, "Greater": operator.gt, "Min": min, "Max": max}


def _unknown(op: str, u: Any, v: Any) -> Any:
    """``op`` of two entries of shape values, one of them "N" or "?": "?", but where the batch's being at least 1
    decides an Equal (torch's expand(n, -1, -1) asks whether n is -1)."""
    if op == "Equal" and "?" not in (u, v):
        other = v if u == "N" else u
        return True if other == "N" else False if other < 1 else "?"
    return "?"


def _make_binary(op: str) -> Fold:
    fn = _BINARY[op]

    def apply(ins, attrs, opset):
        a, b = ins
        if a.dtype == object or b.dtype == object:  # a shape value: "N" and "?" give "?"
            each = np.frompyfunc(lambda u, v: _unknown(op, u, v) if isinstance(u, str) or isinstance(v, str)
                                 else fn(u, v), 2, 1)
            return np.asarray(each(a, b), dtype=object)
        if op == "Div" and a.dtype.kind in "iu":
            return np.asarray(np.frompyfunc(_divide, 2, 1)(a, b), dtype=np.result_type(a, b))
        if op in ("Min", "Max"):
            return (np.minimum if op == "Min" else np.maximum)(a, b)
        return np.asarray(fn(a, b)).astype(np.result_type(a, b) if op not in ("Equal", "Less", "Greater") else bool)
    return apply


for _op in _BINARY:
    FOLDS[_op] = _make_binary(_op)


@folds("Mod")
def _mod(ins, attrs, opset):
    a, b = ins
    return np.fmod(a, b) if int(attrs.get("fmod", 0)) else np.mod(a, b)


@folds("Where")
def _where(ins, attrs, opset):
    if any(v.dtype == object for v in ins):  # a shape value: an unknown condition picks only where both agree
        pick = np.frompyfunc(lambda c, a, b: (a if a == b else "?") if isinstance(c, str) else a if c else b, 3, 1)
        return np.asarray(pick(*ins), dtype=object)
    return np.where(ins[0].astype(bool), ins[1], ins[2])


_UNARY = {"Sqrt": np.sqrt, "Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil,
          "Reciprocal": np.reciprocal, "Not": np.logical_not}


def _make_unary(op: str) -> Fold:
    fn = _UNARY[op]
    return lambda ins, attrs, opset: np.asarray(fn(ins[0]))


for _op in _UNARY:
    FOLDS[_op] = _make_unary(_op)


def fold(op: str, ins: list[Optional[np.ndarray]], attrs: dict, opset: int) -> Optional[np.ndarray]:
    """The value of a node of ``op`` on known inputs, or None where it is not folded here (or the shape values'
    unknowns make it unknowable)."""
    fn = FOLDS.get(op)
    if fn is None:
        return None
    sym = any(v is not None and symbolic(v) for v in ins)
    if sym and op not in ("Identity", "Cast", "Unsqueeze", "Squeeze", "Concat", "Gather", "Slice", "Reshape",
                          "Shape", "Add", "Sub", "Mul", "Div", "Equal", "Where"):
        return None
    try:
        out = fn(list(ins), attrs, opset)
    except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
        return None  # the reader says what is wrong with the node
    return settled(np.asarray(out, dtype=object) if sym else np.asarray(out))
