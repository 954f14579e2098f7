"""Products and sums: Gemm and MatMul by a constant (a Dense on the last axis; MatMul + Add of a bias is one),
MatMul of two computed values, Add and Sum (a residual), Mul of computed values (a gate), Mul and Div by a
number (Scale), and images times a learned (C, 1, 1) (ConvNeXt's layer scale, a depthwise 1x1 Conv2d)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import Add, Conv2d, Dense, Div, MatMul, Mul, Scale, Sub
from multidev.nn.onnx.base import bad, decimal, rank, reads, writes
from multidev.nn.onnx.naming import clean, hint
from multidev.nn.onnx.ops_tokens import position
from multidev.nn.onnx.reader import Reader, Value
from multidev.nn.onnx.writer import Writer


def _dense(r: Reader, node, x: Value, w: np.ndarray, b: Optional[np.ndarray], out: Optional[str] = None) -> int:
    """A Dense on the last axis of ``x``, of any rank (images' (H, W, C) after ConvNeXt's and Swin's permute)."""
    if x[1] == "gap" or w.ndim != 2:
        raise bad(node, f"multiplies {'pooled (N, C, 1, 1) values' if x[1] == 'gap' else 'by a weight of shape '}"
                        f"{'' if x[1] == 'gap' else w.shape}: multidev.nn's Dense multiplies the last axis of "
                        f"features or tokens by a matrix")
    params = {"weight": w}
    if b is not None:
        if b.size not in (1, w.shape[0]) or b.ndim > 1 and set(b.shape[:-1]) != {1}:
            raise bad(node, f"adds a bias of shape {b.shape}: multidev.nn's Dense adds one per output feature")
        params["bias"] = np.broadcast_to(b.reshape(-1), (w.shape[0],))
    layer, name = Dense(int(w.shape[0]), bias=b is not None), hint(node, "fc", r.named(node.input[1]))
    return r.emit(node, layer, [x], x[1], name, r.weights(node, params), out=out)


@reads("Gemm")
def _gemm(r: Reader, node, attrs: dict) -> None:
    if int(attrs.get("transA", 0)):
        raise bad(node, "has transA 1: multidev.nn's Dense takes samples as rows")
    w = r.const(node, 1, "weight")
    w = w if int(attrs.get("transB", 0)) else w.T  # multidev's layout is torch's (out, in)
    b = r.optional(node, 2)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    _dense(r, node, r.value(node), w * w.dtype.type(alpha) if alpha != 1 else w,
           b * b.dtype.type(beta) if b is not None and beta != 1 else b)


def _bias(r: Reader, node, width: int) -> Optional[tuple[np.ndarray, Any, int]]:
    """(bias, Add node, its index) of the Add of a constant that alone reads a MatMul's product, else None."""
    j = r.only_reader(node.output[0])
    add = r.op(j, "Add")
    other = r.others(add, node.output[0]) if add is not None and len(add.input) == 2 else []
    b = r.consts.get(other[0]) if len(other) == 1 else None
    if b is None or b.size not in (1, width) or b.ndim > 1 and set(b.shape[:-1]) != {1}:
        return None
    return b, add, j  # type: ignore[return-value]


@reads("MatMul", note="by a constant matrix (a Dense, with the Add of its bias), or of two computed values")
def _matmul(r: Reader, node, attrs: dict) -> None:
    if node.input[1] in r.consts:
        w, x = r.const(node, 1, "weight"), r.value(node)
        if w.ndim != 2:
            raise bad(node, f"multiplies by a weight of shape {w.shape}: multidev.nn's Dense multiplies the last axis "
                            f"of features or tokens by a matrix")
        found = _bias(r, node, w.shape[-1])
        if found is None:
            _dense(r, node, x, w.T, None)
            return
        bias, add, j = found
        r.skip.add(j)
        _dense(r, node, x, w.T, bias, add.output[0])
        return
    a, b = r.value(node, 0), r.value(node, 1)
    if rank(a[1]) != rank(b[1]) or rank(a[1]) < 3 or "gap" in (a[1], b[1]):
        raise bad(node, f"multiplies two computed values of rank {rank(a[1])} and {rank(b[1])}: multidev.nn's "
                        f"MatMul multiplies each sample's matrices, (N, ..., M, K) by (N, ..., K, P)")
    r.emit(node, MatMul(), [a, b], a[1], hint(node, "matmul"))


_KINDS = {"img": "images (N, C, H, W)", "feat": "features (N, F)", "gap": "pooled values (N, C, 1, 1)"}


_LAYER = {"adds": "Add", "multiplies": "Mul", "subtracts": "Sub", "divides": "Div"}


def _same_kind(node, inputs: list[Value], what: str) -> str:
    kinds = sorted({kind for _, kind in inputs})
    if len(kinds) != 1:
        raise bad(node, f"{what} {' and '.join(_KINDS.get(k, f'values of rank {rank(k)}') for k in kinds)}: "
                        f"multidev.nn's {_LAYER[what]} takes values of one rank")
    return kinds[0]


@reads("Add", "Sum", note="of computed values; a learned (1, L, D) to tokens (PositionEmbedding)")
def _add(r: Reader, node, attrs: dict) -> None:
    """A residual sum of computed values, or a position embedding (a bias after MatMul is read with it)."""
    consts = [k for k, v in enumerate(node.input) if v in r.consts]
    if node.op_type == "Add" and len(consts) == 1:
        if position(r, node, r.value(node, 1 - consts[0]), node.input[consts[0]]):
            return
        raise bad(node, "adds a constant: multidev.nn adds constants only as the bias of MatMul (a Dense) or as a "
                        "position embedding (1, L, D) to tokens")
    inputs = [r.value(node, k) for k in range(len(node.input))]
    kind = _same_kind(node, inputs, "adds")
    if len(inputs) == 1:
        r.values[node.output[0]] = inputs[0]
        return
    r.emit(node, Add(), inputs, kind, hint(node, "add"))


def _by_constant(r: Reader, node, x: Value, name: str, divide: bool) -> None:
    """x times (or over) a number: Scale; images times a learned (C, 1, 1): a depthwise 1x1 Conv2d without bias,
    whose weight is exactly that per-channel factor (with the same gradient)."""
    c = r.consts[name]
    if c.size == 1 and c.dtype.kind == "f":
        value = decimal(float(c.reshape(-1)[0]))
        r.emit(node, r.make(node, Scale, 1.0 / value if divide else value), [x], x[1], hint(node, "scale"))
        return
    shape = r.shape(x)
    per_channel = c.ndim in (3, 4) and c.shape[-2:] == (1, 1) and (c.ndim == 3 or c.shape[0] == 1) \
        and (shape is None or c.shape[-3] == shape[0])
    if divide or x[1] != "img" or not per_channel or c.dtype.kind != "f":
        raise bad(node, f"{'divides' if divide else 'multiplies'} by the constant {name!r} of shape {c.shape}: "
                        f"multidev.nn's Mul multiplies computed values; a constant factor may be a number (Scale) "
                        f"or, for images, one per channel (C, 1, 1)")
    channels = int(c.shape[-3])
    weight = r.weights(node, {"weight": c.reshape(channels, 1, 1, 1)})
    named = ("exact", clean(r.named(name)), "conv") if r.named(name) in r.inits else hint(node, "conv")
    r.emit(node, Conv2d(channels, 1, groups=channels, bias=False), [x], "img", named, weight)


@reads("Mul", note="of computed values; by a number (Scale); images by a learned (C, 1, 1); x * Sigmoid(x) is "
                   "SiLU")
def _mul(r: Reader, node, attrs: dict) -> None:
    const = [k for k, v in enumerate(node.input) if v in r.consts]
    if len(const) == 1 and len(node.input) == 2:
        _by_constant(r, node, r.value(node, 1 - const[0]), node.input[const[0]], False)
        return
    inputs = [r.value(node, k) for k in range(len(node.input))]
    r.emit(node, Mul(), inputs, _same_kind(node, inputs, "multiplies"), hint(node, "mul"))


@reads("Sub", note="of computed values")
def _sub(r: Reader, node, attrs: dict) -> None:
    const = [v for v in node.input if v in r.consts]
    if const:
        raise bad(node, f"subtracts with the constant {const[0]!r}: multidev.nn's Sub takes computed values")
    inputs = [r.value(node, k) for k in range(2)]
    r.emit(node, Sub(), inputs, _same_kind(node, inputs, "subtracts"), hint(node, "sub"))


@reads("Div", note="of computed values; by a number (Scale)")
def _div(r: Reader, node, attrs: dict) -> None:
    if node.input[1] in r.consts:
        _by_constant(r, node, r.value(node), node.input[1], True)
        return
    inputs = [r.value(node, k) for k in range(2)]
    r.emit(node, Div(), inputs, _same_kind(node, inputs, "divides"), hint(node, "div"))


@writes(Dense)
def _w_dense(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """Gemm for features; MatMul by the transposed weight (then Add of the bias) on the last axis of tokens."""
    if len(w.shapes[n.inputs[0]]) == 1:
        inputs = ins + [w.init(n, "weight")] + ([w.init(n, "bias")] if n.layer.bias else [])
        w.add("Gemm", inputs, out, n.name, transB=1)
        return
    weight = w.init(n, "weight", w.state[f"{n.name}.weight"].T)
    if not n.layer.bias:
        w.add("MatMul", ins + [weight], out, n.name)
        return
    w.add("MatMul", ins + [weight], n.name + "/product", n.name + "/MatMul")
    w.add("Add", [n.name + "/product", w.init(n, "bias")], out, n.name)


@writes(Add)
def _w_add(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Add" if len(ins) == 2 else "Sum", ins, out, n.name)


@writes(Mul)
def _w_mul(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """ONNX's Mul takes two inputs: three or more are multiplied in turn."""
    acc = ins[0]
    for k, x in enumerate(ins[1:], start=1):
        last = k == len(ins) - 1
        w.add("Mul", [acc, x], out if last else f"{n.name}/product{k}", n.name if last else f"{n.name}/Mul{k}")
        acc = f"{n.name}/product{k}"


@writes(Sub, Div)
def _w_sub_div(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add(type(n.layer).__name__, ins, out, n.name)


@writes(MatMul)
def _w_matmul(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("MatMul", ins, out, n.name)


@writes(Scale)
def _w_scale(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Mul", ins + [w.const(n.name + "/factor", n.layer.factor)], out, n.name)
