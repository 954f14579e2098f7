"""Shapes and plumbing: Identity, Dropout, Flatten, Reshape to (N, -1) (its shape a constant or torch's
x.view(x.size(0), -1) arithmetic: Shape, Gather, Unsqueeze, Squeeze, Cast, Concat), Concat of channels."""

from __future__ import annotations

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import Concat, Dropout, Flatten
from multidev.nn.onnx import base
from multidev.nn.onnx.base import RANK, bad, decimal, reads, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader
from multidev.nn.onnx.writer import Writer


@reads("Identity")
def _identity(r: Reader, node, attrs: dict) -> None:
    r.values[node.output[0]] = r.value(node)


@reads("Constant")
def _constant(r: Reader, node, attrs: dict) -> None:
    """Never reached: the reader folds constants before the pass (registered so that SUPPORTED names it)."""


@reads("Transpose", note="of a weight")
def _transpose(r: Reader, node, attrs: dict) -> None:
    """A Transpose of a constant is folded before the pass; one of a computed value reorders its axes."""
    raise bad(node, f"transposes a computed value (perm {list(attrs.get('perm', []))}): multidev.nn keeps images "
                    f"in (N, C, H, W) order and transposes only weights")


@reads("Dropout")
def _dropout(r: Reader, node, attrs: dict) -> None:
    ratio = r.optional(node, 1)
    p = float(attrs.get("ratio", 0.5)) if ratio is None else float(ratio.reshape(-1)[0])
    x = r.value(node)
    r.emit(node, r.make(node, Dropout, decimal(p)), [x], x[1], hint(node, "dropout"))  # 0.3, not 0.30000001


@reads("Flatten")
def _flatten(r: Reader, node, attrs: dict) -> None:
    x = r.value(node)
    axis = int(attrs.get("axis", 1))
    if axis % RANK[x[1]] != 1:
        raise bad(node, f"flattens from axis {axis}: multidev.nn's Flatten keeps the batch axis alone (axis 1)")
    if x[1] == "gap":  # multidev's GlobalAvgPool already gives (N, C)
        r.values[node.output[0]] = (x[0], "feat")
    else:
        r.emit(node, Flatten(), [x], "feat", hint(node, "flatten"))


@reads("Reshape", note="to (N, -1), its shape a constant or from Shape, Gather, Unsqueeze, Squeeze, Cast, Concat")
def _reshape(r: Reader, node, attrs: dict) -> None:
    v = node.input[1]
    shape = list(r.syms[v].reshape(-1)) if v in r.syms else list(r.const(node, 1, "shape").reshape(-1))
    if "?" in shape or "N" in shape[1:]:
        raise bad(node, "reshapes to a shape computed from sizes other than the batch: multidev.nn reshapes only "
                        "to (N, -1), a Flatten")
    shape = [0 if d == "N" else int(d) for d in shape]
    if len(shape) != 2 or not (shape[1] == -1 and shape[0] >= 0 or shape[1] > 0 and shape[0] in (0, -1)):
        raise bad(node, f"reshapes to {shape}: multidev.nn reshapes only to (N, -1), a Flatten")
    x = r.value(node)
    if x[1] == "img":
        index = r.emit(node, Flatten(), [x], "feat", hint(node, "flatten"))
    else:
        r.values[node.output[0]] = (x[0], "feat")
        index = x[0]
    if shape[1] > 0:
        r.features.append((node, index, shape[1]))


@reads("Shape")
def _shape(r: Reader, node, attrs: dict) -> None:
    """The sizes of a value as a shape value: the batch "N", the rest unknown ("?"); torch's x.size(0)."""
    dims = np.array(["N"] + ["?"] * (RANK[r.value(node)[1]] - 1), dtype=object)
    r.syms[node.output[0]] = dims[int(attrs.get("start", 0)):attrs.get("end")]


@reads("Gather", "Unsqueeze", "Squeeze", "Cast", note="of shape values")
def _shape_arithmetic(r: Reader, node, attrs: dict) -> None:
    """Gather, Unsqueeze, Squeeze, Cast and Concat of shape values: x.view(x.size(0), -1) as torch writes it."""
    ins = [r.syms.get(v, r.consts[v].astype(object) if v in r.consts else None) for v in node.input if v]
    if any(v is None for v in ins):
        raise bad(node, f"is not supported by multidev.nn on computed values: supported ops are {base.supported()}")
    op, x = node.op_type, ins[0]
    axes = [int(a) for a in attrs["axes"]] if "axes" in attrs else [int(a) for a in ins[1].reshape(-1)] \
        if len(ins) > 1 else []
    if op == "Gather":
        x = np.take(x, ins[1].astype(np.int64), axis=int(attrs.get("axis", 0)))
    elif op == "Unsqueeze":
        for axis in sorted(a % (x.ndim + len(axes)) for a in axes):
            x = np.expand_dims(x, axis)
    elif op == "Squeeze":
        x = np.squeeze(x, axis=tuple(axes) if axes else None)
    elif op == "Concat":
        x = np.concatenate([v.reshape(-1) for v in ins])
    r.syms[node.output[0]] = np.asarray(x, dtype=object)


@reads("Concat", note="of channels, or of shape values")
def _concat(r: Reader, node, attrs: dict) -> None:
    if any(v in r.syms for v in node.input):
        _shape_arithmetic(r, node, attrs)
        return
    inputs = [r.value(node, k) for k in range(len(node.input))]
    if len({kind for _, kind in inputs}) != 1:
        raise bad(node, "joins values of different ranks")
    axis = int(attrs.get("axis", 1))
    if axis % RANK[inputs[0][1]] != 1:
        raise bad(node, f"joins along axis {axis}: multidev.nn's Concat joins channels (axis 1)")
    if len(inputs) == 1:
        r.values[node.output[0]] = inputs[0]
        return
    r.emit(node, Concat(), inputs, inputs[0][1], hint(node, "concat"))


@writes(Flatten, Concat)
def _w_axis1(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Flatten" if type(n.layer) is Flatten else "Concat", ins, out, n.name, axis=1)


@writes(Dropout)
def _w_dropout(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Dropout", ins + [w.const(n.name + "/ratio", n.layer.p)], out, n.name)  # no training_mode: identity
