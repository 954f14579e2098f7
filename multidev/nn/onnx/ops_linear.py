"""Products and sums: Gemm and MatMul (a Dense; MatMul + Add of a constant is one), Add and Sum (a residual),
Mul of two computed values (a gate, as squeeze-and-excitation's (N, C, H, W) * (N, C, 1, 1))."""

from __future__ import annotations

from typing import Optional

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import Add, Dense, Mul
from multidev.nn.onnx.base import bad, reads, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader, Value
from multidev.nn.onnx.writer import Writer


def _dense(r: Reader, node, x: Value, w: np.ndarray, b: Optional[np.ndarray]) -> int:
    if x[1] != "feat":
        raise bad(node, f"multiplies the last axis of {'images' if x[1] == 'img' else 'pooled values'} "
                        f"(N, C, H, W) by a matrix: multidev.nn's Dense takes features (N, F); flatten them first")
    if w.ndim != 2:
        raise bad(node, f"has a weight of shape {w.shape}: multidev.nn's Dense needs a matrix")
    params = {"weight": w}
    if b is not None:
        if b.size not in (1, w.shape[0]) or b.ndim > 2 or b.ndim == 2 and b.shape[0] != 1:
            raise bad(node, f"adds a bias of shape {b.shape}: multidev.nn's Dense adds one per output feature")
        params["bias"] = np.broadcast_to(b.reshape(-1), (w.shape[0],))
    layer = Dense(int(w.shape[0]), bias=b is not None)
    name = hint(node, "fc", r.origin.get(node.input[1], node.input[1]))
    return r.emit(node, layer, [x], "feat", name, r.weights(node, params))


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


@reads("MatMul", note="by a constant matrix")
def _matmul(r: Reader, node, attrs: dict) -> None:
    if node.input[1] not in r.consts:
        raise bad(node, "multiplies two computed values (a batched MatMul, as attention's): multidev.nn's Dense "
                        "multiplies features (N, F) by a constant weight matrix")
    _dense(r, node, r.value(node), r.const(node, 1, "weight").T, None)


_KINDS = {"img": "images (N, C, H, W)", "feat": "features (N, F)", "gap": "pooled values (N, C, 1, 1)"}


def _same_kind(node, inputs: list[Value], what: str) -> str:
    kinds = sorted({kind for _, kind in inputs})
    if len(kinds) != 1:
        raise bad(node, f"{what} {' and '.join(_KINDS[k] for k in kinds)}: multidev.nn's "
                        f"{'Add' if what == 'adds' else 'Mul'} takes values of one rank")
    return kinds[0]


@reads("Add", "Sum")
def _add(r: Reader, node, attrs: dict) -> None:
    """A residual sum of computed values, or a constant bias after MatMul (the two make one Dense)."""
    consts = [k for k, v in enumerate(node.input) if v in r.consts]
    if node.op_type == "Add" and len(consts) == 1:
        ref = r.value(node, 1 - consts[0])[0]
        prev = r.layers[ref] if isinstance(ref, int) else None
        if prev is not None and isinstance(prev.layer, Dense) and not prev.layer.bias \
                and len(r.readers[node.input[1 - consts[0]]]) == 1:  # nothing else reads the product
            fused = _dense(r, node, (prev.inputs[0], "feat"), prev.params["weight"], r.consts[node.input[consts[0]]])
            r.layers[fused].hint = prev.hint
            r.layers[ref] = r.layers.pop()
            r.values[node.output[0]] = (ref, "feat")
            return
        raise bad(node, "adds a constant: multidev.nn adds constants only as the bias of MatMul (a Dense)")
    inputs = [r.value(node, k) for k in range(len(node.input))]
    kind = _same_kind(node, inputs, "adds")
    if len(inputs) == 1:
        r.values[node.output[0]] = inputs[0]
        return
    r.emit(node, Add(), inputs, kind, hint(node, "add"))


@reads("Mul", note="of computed values; x * Sigmoid(x) is SiLU")
def _mul(r: Reader, node, attrs: dict) -> None:
    const = next((v for v in node.input if v in r.consts), None)
    if const is not None:
        raise bad(node, f"multiplies by the constant {const!r}: multidev.nn's Mul multiplies computed values (a "
                        f"constant factor belongs in the weights of the layer before it)")
    inputs = [r.value(node, k) for k in range(len(node.input))]
    r.emit(node, Mul(), inputs, _same_kind(node, inputs, "multiplies"), hint(node, "mul"))


@writes(Dense)
def _w_dense(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    inputs = ins + [w.init(n, "weight")] + ([w.init(n, "bias")] if n.layer.bias else [])
    w.add("Gemm", inputs, out, n.name, transB=1)


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
