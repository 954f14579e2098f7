"""Activations: Relu, Gelu, Tanh, Sigmoid, Clip (ReLU6), LeakyRelu, HardSigmoid, HardSwish, Softmax along a
sample's axis; SiLU and GELU's decomposed forms are patterns (``patterns``), written back as torch writes them."""

from __future__ import annotations

import math

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import GELU, HardSigmoid, HardSwish, LeakyReLU, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Tanh
from multidev.nn.onnx.base import bad, decimal, rank, reads, text, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader
from multidev.nn.onnx.writer import Writer

_PLAIN = {"Relu": ReLU, "Tanh": Tanh, "Sigmoid": Sigmoid, "HardSwish": HardSwish}


def _apply(r: Reader, node, layer) -> None:
    x = r.value(node)
    r.emit(node, layer, [x], x[1], hint(node, layer.kind))


@reads("Relu", "Tanh", "Sigmoid", "HardSwish")
def _plain(r: Reader, node, attrs: dict) -> None:
    _apply(r, node, _PLAIN[node.op_type]())


@reads("Gelu", note="or its erf or tanh form, as torch writes it below opset 20")
def _gelu(r: Reader, node, attrs: dict) -> None:
    _apply(r, node, r.make(node, GELU, approximate=text(attrs.get("approximate", "none"))))


@reads("Softmax", note="along a sample's axis")
def _softmax(r: Reader, node, attrs: dict) -> None:
    """Below opset 13 ONNX's Softmax normalises every axis from ``axis`` on together: one axis only where that is
    the last."""
    x = r.value(node)
    n = rank(x[1])
    axis = int(attrs.get("axis", -1 if r.opset >= 13 else 1))
    if r.opset < 13 and axis % n != n - 1:
        raise bad(node, f"normalises axes {axis % n} to {n - 1} together (Softmax below opset 13): multidev.nn's "
                        f"Softmax normalises one axis; export with opset 13 or newer")
    _apply(r, node, Softmax(r.axis(node, axis, x, "normalises")))


@reads("LeakyRelu")
def _leaky(r: Reader, node, attrs: dict) -> None:
    _apply(r, node, LeakyReLU(decimal(attrs.get("alpha", 0.01))))


def torchs_hardsigmoid(r: Reader, node) -> bool:
    """Whether a HardSigmoid node has torch's alpha 1/6 and beta 1/2 (ONNX's defaults are 0.2 and 0.5)."""
    attrs = {a.name: r.onnx.helper.get_attribute_value(a) for a in node.attribute}
    return math.isclose(attrs.get("alpha", 0.2), 1 / 6, rel_tol=1e-6) \
        and math.isclose(attrs.get("beta", 0.5), 0.5, rel_tol=1e-6)


@reads("HardSigmoid")
def _hardsigmoid(r: Reader, node, attrs: dict) -> None:
    if not torchs_hardsigmoid(r, node):
        raise bad(node, f"has alpha {attrs.get('alpha', 0.2):.6g} and beta {attrs.get('beta', 0.5):.6g}: "
                        f"multidev.nn's HardSigmoid is torch's, x / 6 + 1 / 2 (alpha 1/6, beta 0.5)")
    _apply(r, node, HardSigmoid())


@reads("Clip", note="to [0, 6], ReLU6, or [0, inf), ReLU")
def _clip(r: Reader, node, attrs: dict) -> None:
    """min and max are inputs from opset 11, attributes before; each may be missing (no bound)."""
    bounds = []
    for k, (name, default) in enumerate((("min", -math.inf), ("max", math.inf)), start=1):
        given = node.input[k] if k < len(node.input) else ""
        if given:
            value = r.const(node, k, name)
            bounds.append(float(value.reshape(-1)[0]) if value.size == 1 else math.nan)
        else:
            bounds.append(float(attrs.get(name, default)))
    low, high = bounds
    if low == 0 and high == 6:
        _apply(r, node, ReLU6())
    elif low == 0 and high >= 3.4e38:  # opset 6's default max is FLT_MAX
        _apply(r, node, ReLU())
    else:
        raise bad(node, f"clips to [{low:g}, {high:g}]: multidev.nn clips only to [0, 6] (ReLU6) or [0, inf) (ReLU)")


@writes(ReLU, Tanh, Sigmoid, HardSigmoid, LeakyReLU)
def _w_plain(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    layer = n.layer
    attrs = {"alpha": layer.negative_slope} if type(layer) is LeakyReLU \
        else {"alpha": 1 / 6, "beta": 0.5} if type(layer) is HardSigmoid else {}
    op = {ReLU: "Relu", Tanh: "Tanh", Sigmoid: "Sigmoid", HardSigmoid: "HardSigmoid", LeakyReLU: "LeakyRelu"}
    w.add(op[type(layer)], ins, out, n.name, **attrs)


@writes(ReLU6)
def _w_relu6(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Clip", ins + [w.const(n.name + "/min", 0.0), w.const(n.name + "/max", 6.0)], out, n.name)


@writes(SiLU, HardSwish)
def _w_gated(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """SiLU as torch writes it (x * Sigmoid(x)); HardSwish as HardSwish from opset 14, x * HardSigmoid(x) before."""
    if type(n.layer) is HardSwish and w.opset >= 14:
        w.add("HardSwish", ins, out, n.name)
        return
    gate, attrs = ("Sigmoid", {}) if type(n.layer) is SiLU else ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5})
    w.add(gate, ins, n.name + "/gate", n.name + "/" + gate, **attrs)
    w.add("Mul", ins + [n.name + "/gate"], out, n.name + "/Mul")


@writes(GELU)
def _w_gelu(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """Gelu from opset 20; below, the form torch writes (and from_onnx reads): x * (1 + erf(x / sqrt 2)) * 0.5,
    or with tanh(sqrt(2 / pi) * (x + 0.044715 x^3)) for erf."""
    if w.opset >= 20:
        w.add("Gelu", ins, out, n.name, **({"approximate": "tanh"} if n.layer.approximate == "tanh" else {}))
        return
    p, x = n.name + "/", ins[0]
    if n.layer.approximate == "tanh":
        w.add("Mul", [x, x], p + "square", p + "Mul")
        w.add("Mul", [x, p + "square"], p + "cube", p + "Mul_1")
        w.add("Mul", [w.const(p + "cubic", 0.044715), p + "cube"], p + "cubic_term", p + "Mul_2")
        w.add("Add", [x, p + "cubic_term"], p + "inner", p + "Add")
        w.add("Mul", [w.const(p + "scale", math.sqrt(2 / math.pi)), p + "inner"], p + "scaled", p + "Mul_3")
        w.add("Tanh", [p + "scaled"], p + "phi", p + "Tanh")
    else:
        w.add("Div", [x, w.const(p + "sqrt2", math.sqrt(2))], p + "scaled", p + "Div")
        w.add("Erf", [p + "scaled"], p + "phi", p + "Erf")
    w.add("Add", [p + "phi", w.const(p + "one", 1.0)], p + "cdf2", p + "Add_1")
    w.add("Mul", [x, p + "cdf2"], p + "twice", p + "Mul_4")
    w.add("Mul", [p + "twice", w.const(p + "half", 0.5)], out, p + "Mul_5")



@writes(Softmax)
def _w_softmax(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    axis = n.layer.axis
    w.add("Softmax", ins, out, n.name, axis=axis + 1 if axis >= 0 else axis)
