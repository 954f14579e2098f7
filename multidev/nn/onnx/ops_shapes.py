"""Shapes and plumbing: Identity, Dropout, Cast, Flatten, Reshape (the batch kept first; its shape a constant or
torch's arithmetic on Shape), Transpose (the batch kept first), Squeeze and Unsqueeze of a sample's axes."""

from __future__ import annotations

from typing import Optional

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import DropPath, Dropout, Flatten, Reshape, Transpose
from multidev.nn.onnx.base import FLOATS, bad, decimal, kind, rank, reads, writes
from multidev.nn.onnx.constants import settled, symbolic
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader, Value
from multidev.nn.onnx.writer import Writer


@reads("Identity")
def _identity(r: Reader, node, attrs: dict) -> None:
    r.values[node.output[0]] = r.value(node)


@reads("Cast", note="of computed values to floating point; of shape values")
def _cast(r: Reader, node, attrs: dict) -> None:
    """A Cast of shape values is folded; one of a computed value to a float type changes nothing multidev keeps."""
    if int(attrs.get("to", 0)) not in FLOATS:
        raise bad(node, f"casts a computed value to ONNX type {attrs.get('to')}: multidev.nn computes floating point")
    r.values[node.output[0]] = r.value(node)


@reads("Constant")
def _constant(r: Reader, node, attrs: dict) -> None:
    """Never reached: the reader folds constants before the pass (registered so that SUPPORTED names it)."""


@reads("Dropout")
def _dropout(r: Reader, node, attrs: dict) -> None:
    ratio = r.optional(node, 1)
    p = float(attrs.get("ratio", 0.5)) if ratio is None else float(ratio.reshape(-1)[0])
    x = r.value(node)
    r.emit(node, r.make(node, Dropout, decimal(p)), [x], x[1], hint(node, "dropout"))  # 0.3, not 0.30000001


def flatten(r: Reader, node, x: Value) -> int:
    """``x`` as (N, -1): a Flatten, or ``x`` itself where it is features (or pooled, which multidev holds so)."""
    if x[1] in ("feat", "gap"):
        r.values[node.output[0]] = (x[0], "feat")
        return x[0]  # type: ignore[return-value]
    return r.emit(node, Flatten(), [x], "feat", hint(node, "flatten"))


@reads("Flatten")
def _flatten(r: Reader, node, attrs: dict) -> None:
    x = r.value(node)
    axis = int(attrs.get("axis", 1))
    if axis % rank(x[1]) != 1:
        raise bad(node, f"flattens from axis {axis}: multidev.nn's Flatten keeps the batch axis alone (axis 1)")
    flatten(r, node, x)


def _show(entries: list) -> str:
    return "[" + ", ".join(str(e) for e in entries) + "]"


def _batch_first(r: Reader, node, entries: list) -> None:
    """The first entry of a Reshape's shape is the batch: "N", 0 (copied), -1 (the rest fixed), or the file's
    batch size where it is fixed (torch's export writes x.size(0) as that number)."""
    first, rest = entries[0], entries[1:]
    ok = first == "N" or first == 0 or first == -1 and -1 not in rest \
        or r.batch is not None and not isinstance(first, str) and first == r.batch
    if not ok or "N" in rest:
        raise bad(node, f"reshapes to {_show(entries)}, moving the batch axis: multidev.nn keeps the batch axis "
                        f"first (0, -1 or the batch size there, as x.view(x.size(0), ...) writes it)")


def _sample(r: Reader, node, x: Value, entries: list, allowzero: bool) -> tuple[int, ...]:
    """The sample's shape a Reshape asks for: ONNX's 0 copies the input's size on that axis."""
    given = r.onnx_shape(x)
    out = []
    for k, d in enumerate(entries[1:]):
        if d == 0 and not allowzero and given is not None and k < len(given):
            d = given[k]
        if isinstance(d, str) or d == 0:
            raise bad(node, f"reshapes to {_show(entries)}, sizes multidev.nn cannot tell while the file's input "
                            f"has no fixed size: export with a fixed input size")
        out.append(int(d))
    return tuple(out)


@reads("Reshape", note="keeping the batch first; its shape a constant or from Shape, Gather, Concat...")
def _reshape(r: Reader, node, attrs: dict) -> None:
    known = r.known(node.input[1])
    if known is None:
        r.const(node, 1, "shape")  # one line: the shape comes from a computed value
    entries = [v if isinstance(v, str) else int(v) for v in known.reshape(-1)]  # type: ignore[union-attr]
    x = r.value(node)
    _batch_first(r, node, entries)
    if len(entries) == 2 and entries[1] in ("?", -1):
        entries[1] = -1  # x.view(x.size(0), -1) of any size
    sample = _sample(r, node, x, entries, bool(int(attrs.get("allowzero", 0))))
    if len(sample) == 1:
        index = flatten(r, node, x)
        if sample[0] > 0:
            r.features.append((node, index, sample[0]))
        return
    r.emit(node, r.make(node, Reshape, sample), [x], kind(len(sample) + 1), hint(node, "reshape"))


@reads("Shape")
def _shape(r: Reader, node, attrs: dict) -> None:
    """The sizes of a value: the batch (its size where the file fixes it, else "N") and the sample's (where the
    file's input size is fixed, else "?"): torch's x.size(k), folded into the shapes that use it."""
    x = r.value(node)
    sample = r.onnx_shape(x)
    dims = ["N" if r.batch is None else r.batch] + (list(sample) if sample is not None else ["?"] * (rank(x[1]) - 1))
    out = settled(np.array(dims, dtype=object)[int(attrs.get("start", 0)):attrs.get("end")])
    (r.syms if symbolic(out) else r.consts)[node.output[0]] = out


def _axes(r: Reader, node, attrs: dict) -> Optional[list[int]]:
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    return [int(a) for a in r.const(node, 1, "axes").reshape(-1)] if len(node.input) > 1 and node.input[1] else None


@reads("Unsqueeze", "Squeeze", note="of a sample's axes, where its size is known; of shape values")
def _squeeze(r: Reader, node, attrs: dict) -> None:
    """A sample's axes of size 1 put in or taken out: a Reshape to the shape that gives."""
    x, axes = r.value(node), _axes(r, node, attrs)
    shape = r.onnx_shape(x)
    if shape is None:
        raise bad(node, "changes the rank of a value whose size multidev.nn does not know: export with a fixed "
                        "input size")
    n = rank(x[1]) + (len(axes or ()) if node.op_type == "Unsqueeze" else 0)
    if axes is None:  # every axis of size 1: the batch's too where the file fixes it at 1
        if r.batch == 1:
            raise bad(node, "squeezes every axis of size 1, the batch axis of this file's too: multidev.nn keeps "
                            "the batch axis first; give Squeeze its axes")
        axes = [k + 1 for k, d in enumerate(shape) if d == 1]
    axes = sorted(a % n for a in axes)
    if 0 in axes:
        raise bad(node, f"{node.op_type.lower()}s the batch axis: multidev.nn keeps the batch axis first")
    out = list(shape)
    if node.op_type == "Unsqueeze":
        for a in axes:
            out.insert(a - 1, 1)
    elif any(shape[a - 1] != 1 for a in axes):
        raise bad(node, f"squeezes axes {axes} of {shape} values, not all of size 1")
    else:
        out = [d for k, d in enumerate(shape) if k + 1 not in axes]
    if len(out) < 2:
        flatten(r, node, x)
        return
    r.emit(node, Reshape(tuple(out)), [x], kind(len(out) + 1), hint(node, "reshape"))


@reads("Transpose", note="keeping the batch axis first; of a weight")
def _transpose(r: Reader, node, attrs: dict) -> None:
    """A Transpose of a constant is folded before the pass; one of a computed value reorders the sample's axes."""
    x = r.value(node)
    perm = [int(p) for p in attrs.get("perm", range(rank(x[1]) - 1, -1, -1))]
    if perm[0] != 0 or x[1] == "gap":
        raise bad(node, f"transposes a computed value (perm {perm}), moving its batch axis: multidev.nn keeps the "
                        f"batch axis first (torch's attention is read whole, as MultiHeadAttention)")
    if perm == sorted(perm):
        r.values[node.output[0]] = x
        return
    r.emit(node, r.make(node, Transpose, tuple(p - 1 for p in perm[1:])), [x], x[1], hint(node, "transpose"))


@writes(Flatten)
def _w_flatten(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Flatten", ins, out, n.name, axis=1)


@writes(Reshape)
def _w_reshape(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """The batch entry 0 (ONNX's "as the input's"), so that the file takes any batch size."""
    w.add("Reshape", ins + [w.ints(n.name + "/shape", (0,) + tuple(n.layer.shape))], out, n.name)


@writes(Transpose)
def _w_transpose(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Transpose", ins, out, n.name, perm=[0] + [p + 1 for p in n.layer.perm])


@writes(Dropout, DropPath)
def _w_dropout(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """Dropout as ONNX's (no training_mode: the identity); DropPath, which ONNX lacks, as the Identity it is in
    inference (read back as nothing)."""
    if type(n.layer) is DropPath:
        w.add("Identity", ins, out, n.name)
        return
    w.add("Dropout", ins + [w.const(n.name + "/ratio", n.layer.p)], out, n.name)

