"""ONNX in and out: a network from an ONNX file as a ``multidev.nn`` Graph, and a Graph written as ONNX.

Why: a network exported from another framework (``torch.onnx.export``,
tf2onnx) trains here on every engine, from its own weights; a network trained
here serves wherever ONNX runs. Reading parses the file with the ``onnx``
package (protobuf data, checked by ``onnx.checker``: no code of the file
runs) and maps each supported op onto a layer; anything multidev cannot
express exactly is one line naming the ONNX node. ``onnx`` is optional
(``pip install 'multidev[onnx]'``) and imported only when a function here runs.

Names: a layer with parameters is named after its weight (torch's
``layer1.0.conv1.weight`` -> ``layer1.0.conv1``), one without after the
module scope torch writes into node names (``/pool/MaxPool`` -> ``pool``), or
numbered by kind (``relu1``) as the model language does.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from multidev.errors import MultidevError, first_line
from multidev.nn.graph import Graph, NodeSpec, Normalization
from multidev.outputs.files import atomic_write
from multidev.nn.layers import (GELU, LN_EPS, Add, AvgPool2d, BatchNorm, Concat, Conv2d, Dense, Dropout, Flatten,
                                GlobalAvgPool, Layer, LayerNorm, MaxPool2d, ReLU, Shape, Sigmoid, Tanh)
from multidev.rules.batchnorm import BN_EPS

#: opsets read: BatchNormalization lost ``spatial`` in 9; newer ones are checked by onnx.checker
MIN_OPSET = 9
#: opsets written: Dropout's ratio is an input from 12, Sum and the rest are stable from 13
MIN_WRITE_OPSET = 13
DEFAULT_OPSET = 17  # LayerNormalization's first opset; GELU is written as Gelu from opset 20
SUPPORTED = ("Add, AveragePool, BatchNormalization, Concat, Constant, Conv, Dropout, Flatten, Gelu (or its "
             "Div/Erf/Add/Mul/Mul form), Gemm, GlobalAveragePool, Identity, LayerNormalization, MatMul, MaxPool, "
             "Relu, Reshape (to N, -1, its shape constant or from Shape, Gather, Unsqueeze, Squeeze, Cast, Concat), "
             "Sigmoid, Sum, Tanh, Transpose (of a weight)")
_FLOATS = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_RANK = {"img": 4, "feat": 2, "gap": 4}  # "gap": ONNX's (N, C, 1, 1), multidev's (N, C)

Ref = Union[int, str]  # a layer's index while reading, or "input"


def _onnx():
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


def _where(node) -> str:
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
    return f"ONNX node '{node.name or node.output[0]}' (op {op})"


def _bad(node, what: str) -> MultidevError:
    return MultidevError(f"{_where(node)} {what}")


def _load(path: Path):
    """The checked model of ``path``; a missing file, a non-ONNX file or an unread opset is one line."""
    onnx = _onnx()
    if not path.is_file():
        raise MultidevError(f"ONNX file {str(path)!r} {'is not a file' if path.exists() else 'does not exist'}")
    from google.protobuf.message import Error as ProtobufError  # onnx's own dependency

    try:
        model = onnx.load(str(path))
    except (ProtobufError, ValueError, OSError) as exc:  # DecodeError: the bytes are not a model
        raise MultidevError(f"{str(path)!r} is not an ONNX model ({first_line(exc)})") from None
    if model.ir_version == 0 or not model.HasField("graph"):
        raise MultidevError(f"{str(path)!r} is not an ONNX model (it holds no graph)")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise MultidevError(f"{str(path)!r} is not a valid ONNX model: {first_line(exc)}") from None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset < MIN_OPSET:
        raise MultidevError(f"{str(path)!r} uses ONNX opset {opset}: multidev reads opset {MIN_OPSET} or newer; "
                            f"export it again with a newer opset")
    return model


def _clean(text: str) -> str:
    """A name made of letters, digits, _ and single dots, none at the ends."""
    text = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.]+", "_", text))
    return text.strip("._")


def _qualify(parts: list[str]) -> str:
    """torch's scope path (``/layer1/layer1.0/act``) as a dotted name (``layer1.0.act``)."""
    name = ""
    for part in map(_clean, parts):
        if part:
            name = part if not name or part.startswith(name + ".") else f"{name}.{part}"
    return name


def _hint(node, kind: str, weight: Optional[str] = None) -> tuple[str, str, str]:
    """("exact", name, kind) or ("scope", scope, kind): what a layer's canonical name derives from."""
    base = _clean(weight.rsplit(".", 1)[0]) if weight and "." in weight else ""
    if base:
        return ("exact", base, kind)
    parts = [p for p in node.name.split("/") if p]
    if len(parts) >= 2:
        return ("scope", _qualify(parts[:-1]), kind)
    if not parts or re.fullmatch(rf"{re.escape(node.op_type)}(_\d+)?", parts[0]) or not _clean(parts[0]):
        return ("scope", "", kind)  # a generated name (Relu_3): numbered by kind as the model language does
    return ("exact", _clean(parts[0]), kind)


def _unique(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


def _names(hints: list[tuple[str, str, str]]) -> list[str]:
    """Canonical names: exact ones as given; a scope holding one layer names it, else kinds are numbered in it."""
    per_scope = Counter(h[1] for h in hints if h[0] == "scope")
    dotted = [h[1] for h in hints if h[1]]
    names, taken, counts = [], {"input"}, Counter()
    for how, base, kind in hints:
        if how == "scope" and base and per_scope[base] == 1 and not any(d.startswith(base + ".") for d in dotted):
            how = "exact"
        if how == "exact":
            names.append(_unique(base, taken))
            continue
        prefix = base + "." if base else ""
        counts[prefix, kind] += 1
        names.append(_unique(f"{prefix}{kind}{counts[prefix, kind]}", taken))
    return names


def _scalar(value: Optional[np.ndarray], target: float) -> bool:
    return value is not None and value.size == 1 and math.isclose(float(value.reshape(-1)[0]), target, rel_tol=1e-6)


def _ints(values, n: int, default: int) -> list[int]:
    return [int(v) for v in values] if values is not None else [default] * n


@dataclass
class _Layer:
    layer: Layer
    inputs: tuple[Ref, ...]
    hint: tuple[str, str, str]
    params: dict[str, np.ndarray] = field(default_factory=dict)


class _Reader:
    """One pass over an ONNX graph's nodes (topologically sorted, as onnx.checker ensures), mapping each to a layer."""

    def __init__(self, onnx, graph) -> None:
        self.onnx, self.graph = onnx, graph
        self.consts: dict[str, np.ndarray] = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
        self.values: dict[str, tuple[Ref, str]] = {}  # ONNX value -> (layer or "input", layout)
        self.layers: list[_Layer] = []
        self.readers: dict[str, list[int]] = {}  # ONNX value -> the nodes reading it (-1: a graph output)
        for i, node in enumerate(graph.node):
            for name in node.input:
                self.readers.setdefault(name, []).append(i)
        for out in graph.output:
            self.readers.setdefault(out.name, []).append(-1)
        self.producer = {v: i for i, node in enumerate(graph.node) for v in node.output}
        self.skip: set[int] = set()
        self.gelu: dict[int, tuple[str, Any]] = {}  # last node of a GELU pattern -> (its x, its Erf node)
        self.features: list[tuple[Any, Ref, int]] = []  # (Reshape node, layer, features its shape asks for)
        self.origin: dict[str, str] = {}  # a transposed weight -> the initializer it came from (its name)
        self.syms: dict[str, np.ndarray] = {}  # shape values: ints, "N" (the batch) or "?" (any other size)

    # values ---------------------------------------------------------------------------------------------
    def const(self, node, k: int, what: str) -> np.ndarray:
        name = node.input[k] if k < len(node.input) else ""
        if name not in self.consts:
            raise _bad(node, f"takes its {what} from {'a computed value ' + repr(name) if name else 'nowhere'}: "
                             f"multidev.nn needs it as an initializer")
        return self.consts[name]

    def optional(self, node, k: int) -> Optional[np.ndarray]:
        return self.consts.get(node.input[k]) if k < len(node.input) and node.input[k] else None

    def value(self, node, k: int = 0) -> tuple[Ref, str]:
        name = node.input[k]
        if name in self.consts:
            raise _bad(node, f"takes the constant {name!r} as input {k}: multidev.nn's layers take computed values")
        if name not in self.values:
            raise _bad(node, f"reads {name!r}, which multidev.nn does not compute (a second input, or an output "
                             f"it leaves out)")
        return self.values[name]

    def emit(self, node, layer: Layer, inputs: list[tuple[Ref, str]], layout: str, hint,
             params: Optional[dict[str, np.ndarray]] = None) -> int:
        self.layers.append(_Layer(layer, tuple(r for r, _ in inputs), hint, params or {}))
        self.values[node.output[0]] = (len(self.layers) - 1, layout)
        return len(self.layers) - 1

    def weights(self, node, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, array in arrays.items():
            if array.dtype.kind != "f":
                raise _bad(node, f"has {name} of type {array.dtype}: multidev.nn's weights are floating point")
        return {k: np.array(v) for k, v in arrays.items()}

    # the pass -------------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Before the pass: constants folded (Constant; Identity or Transpose of a constant), GELU's erf form found."""
        for i, node in enumerate(self.graph.node):
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                self.consts[node.output[0]] = self.constant(node)
                self.skip.add(i)
            elif node.op_type in ("Identity", "Transpose") and node.domain in ("", "ai.onnx") \
                    and node.input[0] in self.consts:
                value = self.consts[node.input[0]]
                if node.op_type == "Transpose":  # torch's Linear(bias=False) without constant folding
                    perm = [a.ints for a in node.attribute if a.name == "perm"]
                    value = np.transpose(value, list(perm[0]) if perm else None)
                    self.origin[node.output[0]] = self.origin.get(node.input[0], node.input[0])
                self.consts[node.output[0]] = value
                self.skip.add(i)
        for i, node in enumerate(self.graph.node):
            if node.op_type == "Erf":
                self.match_gelu(i, node)

    def constant(self, node) -> np.ndarray:
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        if "value" in attrs:
            return self.onnx.numpy_helper.to_array(attrs["value"])
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                           ("value_ints", np.int64)):
            if key in attrs:
                return np.asarray(attrs[key], dtype)
        raise _bad(node, f"holds a {', '.join(attrs) or 'missing'} value: multidev.nn reads tensors and numbers")

    def only_reader(self, value: str) -> Optional[int]:
        readers = self.readers.get(value, [])
        return readers[0] if len(readers) == 1 and readers[0] >= 0 else None

    def op(self, i: Optional[int], op_type: str, reads: Optional[str] = None):
        """Node ``i`` when it is an ``op_type`` (reading ``reads``), else None: one step of a pattern."""
        node = self.graph.node[i] if i is not None else None
        ok = node is not None and node.op_type == op_type and (reads is None or reads in node.input)
        return node if ok else None

    def others(self, node, value: str) -> list[str]:
        return [v for v in node.input if v != value]

    def match_gelu(self, i: int, erf) -> None:
        """x / 2 * (1 + erf(x / sqrt 2)) as torch writes it below opset 20, in its three usual orders."""
        k = self.producer.get(erf.input[0])
        scaled = self.graph.node[k] if k is not None else None
        if scaled is None or self.only_reader(erf.input[0]) != i or len(scaled.input) != 2:
            return
        x, c = scaled.input
        if scaled.op_type == "Mul" and x in self.consts:
            x, c = c, x
        if x in self.consts or not (scaled.op_type == "Div" and _scalar(self.consts.get(c), math.sqrt(2))
                                    or scaled.op_type == "Mul" and _scalar(self.consts.get(c), 1 / math.sqrt(2))):
            return
        j = self.only_reader(erf.output[0])
        plus = self.op(j, "Add")
        if plus is None or not any(_scalar(self.consts.get(v), 1.0) for v in plus.input):
            return
        m1_at = self.only_reader(plus.output[0])
        m1 = self.op(m1_at, "Mul")
        if m1 is None:
            return
        members, last, other = [k, i, j, m1_at], None, self.others(m1, plus.output[0])

        def half(values: list[str]) -> bool:
            return len(values) == 1 and _scalar(self.consts.get(values[0]), 0.5)

        m2_at = self.only_reader(m1.output[0])
        m2 = self.op(m2_at, "Mul", m1.output[0])
        if other == [x] and m2 is not None and half(self.others(m2, m1.output[0])) \
                or half(other) and m2 is not None and self.others(m2, m1.output[0]) == [x]:
            members, last = members + [m2_at], m2_at  # (x * (1 + erf)) * 0.5, or ((1 + erf) * 0.5) * x
        elif len(other) == 1 and self.only_reader(other[0]) == m1_at:
            h_at = self.producer.get(other[0])
            pre = self.op(h_at, "Mul", x)
            if pre is not None and half(self.others(pre, x)):
                members, last = members + [h_at], m1_at  # (x * 0.5) * (1 + erf)
        if last is not None:
            self.skip.update(m for m in members if m != last)
            self.gelu[last] = (x, erf)

    def run(self) -> None:
        self.prepare()
        for i, node in enumerate(self.graph.node):
            if i in self.skip:
                continue
            for out in node.output[1:]:
                if out and self.readers.get(out):
                    raise _bad(node, f"has its output {out!r} read: multidev.nn computes only its first output")
            if i in self.gelu:
                x, erf = self.gelu[i]
                if x not in self.values:
                    raise _bad(erf, f"reads {x!r}, which multidev.nn does not compute")
                self.emit(node, GELU(), [self.values[x]], self.values[x][1], _hint(erf, "gelu"))
                continue
            handler = _READERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            if handler is None:
                raise _bad(node, f"is not supported by multidev.nn: supported ops are {SUPPORTED}")
            handler(self, node, {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute})


# one reader per op: (reader, node, attributes) ------------------------------------------------------------
def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _window(node, attrs: dict, kernel: list[int], layer: str) -> tuple[int, int, int]:
    """(k, stride, padding) of a Conv or pool, or one line naming the attribute multidev.nn cannot express."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise _bad(node, f"has {what}: multidev.nn's {layer} needs square windows, one stride, symmetric "
                             f"padding, no dilation")
    need(len(kernel) == 2, f"a {len(kernel)}-D window")
    need(kernel[0] == kernel[1], f"kernel {kernel[0]}x{kernel[1]}")
    strides = _ints(attrs.get("strides"), 2, 1)
    pads = _ints(attrs.get("pads"), 4, 0)
    need(len(set(strides)) == 1, f"strides {strides}")
    need(len(set(pads)) == 1, f"pads {pads}")
    dilations = _ints(attrs.get("dilations"), 2, 1)
    need(set(dilations) == {1}, f"dilations {dilations}")
    pad_mode = _text(attrs.get("auto_pad", "NOTSET"))
    need(pad_mode in ("NOTSET", "VALID"), f"auto_pad {pad_mode}")
    return kernel[0], strides[0], 0 if pad_mode == "VALID" else pads[0]


def _image(r: _Reader, node, k: int = 0) -> tuple[Ref, str]:
    ref = r.value(node, k)
    if ref[1] != "img":
        raise _bad(node, f"takes {'features' if ref[1] == 'feat' else 'pooled (N, C, 1, 1) values'}: "
                         f"multidev.nn applies it to images (N, C, H, W)")
    return ref


def _conv(r: _Reader, node, attrs: dict) -> None:
    w = r.const(node, 1, "weight")
    if w.ndim != 4:
        raise _bad(node, f"is a {w.ndim - 2}-D convolution: multidev.nn's Conv2d is 2-D")
    if int(attrs.get("group", 1)) != 1:
        raise _bad(node, f"has group {attrs['group']}: multidev.nn's Conv2d has no groups")
    kernel = _ints(attrs.get("kernel_shape"), 2, 0) if "kernel_shape" in attrs else list(w.shape[2:])
    k, stride, pad = _window(node, attrs, kernel, "Conv2d")
    b = r.optional(node, 2)
    params = r.weights(node, {"weight": w, **({} if b is None else {"bias": b})})
    layer = Conv2d(int(w.shape[0]), k, stride=stride, padding=pad, bias=b is not None)
    r.emit(node, layer, [_image(r, node)], "img", _hint(node, "conv", node.input[1]), params)


def _pool(r: _Reader, node, attrs: dict) -> None:
    if int(attrs.get("ceil_mode", 0)) or int(attrs.get("storage_order", 0)):
        raise _bad(node, "has ceil_mode or storage_order set: multidev.nn pools round down, row-major")
    cls = MaxPool2d if node.op_type == "MaxPool" else AvgPool2d
    k, stride, pad = _window(node, attrs, _ints(attrs.get("kernel_shape"), 0, 0), cls.__name__)
    if pad:
        raise _bad(node, f"has pads {_ints(attrs['pads'], 4, 0)}: multidev.nn's {cls.__name__} does not pad")
    r.emit(node, cls(k, None if stride == k else stride), [_image(r, node)], "img", _hint(node, cls.kind))


def _dense(r: _Reader, node, x: tuple[Ref, str], w: np.ndarray, b: Optional[np.ndarray]) -> int:
    if x[1] != "feat":
        raise _bad(node, "takes images: multidev.nn's Dense takes features (N, F); flatten them first")
    if w.ndim != 2:
        raise _bad(node, f"has a weight of shape {w.shape}: multidev.nn's Dense needs a matrix")
    params = {"weight": w}
    if b is not None:
        if b.size not in (1, w.shape[0]) or b.ndim > 2 or b.ndim == 2 and b.shape[0] != 1:
            raise _bad(node, f"adds a bias of shape {b.shape}: multidev.nn's Dense adds one per output feature")
        params["bias"] = np.broadcast_to(b.reshape(-1), (w.shape[0],))
    layer = Dense(int(w.shape[0]), bias=b is not None)
    hint = _hint(node, "fc", r.origin.get(node.input[1], node.input[1]))
    return r.emit(node, layer, [x], "feat", hint, r.weights(node, params))


def _gemm(r: _Reader, node, attrs: dict) -> None:
    if int(attrs.get("transA", 0)):
        raise _bad(node, "has transA 1: multidev.nn's Dense takes samples as rows")
    w = r.const(node, 1, "weight")
    w = w if int(attrs.get("transB", 0)) else w.T  # multidev's layout is torch's (out, in)
    b = r.optional(node, 2)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    _dense(r, node, r.value(node), w * w.dtype.type(alpha) if alpha != 1 else w,
           b * b.dtype.type(beta) if b is not None and beta != 1 else b)


def _matmul(r: _Reader, node, attrs: dict) -> None:
    _dense(r, node, r.value(node), r.const(node, 1, "weight").T, None)


def _add(r: _Reader, node, attrs: dict) -> None:
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
        raise _bad(node, "adds a constant: multidev.nn adds constants only as the bias of MatMul (a Dense)")
    inputs = [r.value(node, k) for k in range(len(node.input))]
    if len({lay for _, lay in inputs}) != 1:
        raise _bad(node, "adds values of different ranks: multidev.nn's Add needs one shape")
    if len(inputs) == 1:
        r.values[node.output[0]] = inputs[0]
        return
    r.emit(node, Add(), inputs, inputs[0][1], _hint(node, "add"))


def _batchnorm(r: _Reader, node, attrs: dict) -> None:
    eps = float(attrs.get("epsilon", 1e-5))
    if not math.isclose(eps, BN_EPS, rel_tol=1e-6):
        raise _bad(node, f"has epsilon {eps:g}: multidev.nn's BatchNorm uses {BN_EPS:g}")
    names = ("gamma", "beta", "running_mean", "running_var")
    arrays = {n: r.const(node, k, n) for k, n in enumerate(names, start=1)}
    if any(a.ndim != 1 for a in arrays.values()):
        raise _bad(node, "has statistics that are not one per channel")
    x = r.value(node)
    r.emit(node, BatchNorm(), [x], x[1], _hint(node, "bn", node.input[1]), r.weights(node, arrays))


def _per_channel(node, array: np.ndarray, rank: int, what: str) -> np.ndarray:
    """A LayerNorm scale as one value per channel: ONNX's is per value of the sample, multidev's per channel."""
    if array.ndim == rank - 1 and rank > 2:
        flat = array.reshape(array.shape[0], -1)
        if np.all(flat == flat[:, :1]):
            return flat[:, 0].copy()
    elif array.ndim == 1 and rank == 2:
        return array
    raise _bad(node, f"has a {what} of shape {array.shape} that varies within a channel: multidev.nn's LayerNorm "
                     f"has one per channel")


def _layernorm(r: _Reader, node, attrs: dict) -> None:
    x = r.value(node)
    rank = _RANK[x[1]]
    axis = int(attrs.get("axis", -1))
    if axis % rank != 1:
        raise _bad(node, f"normalises from axis {axis}: multidev.nn's LayerNorm normalises each whole sample "
                         f"(axis 1)")
    eps = float(attrs.get("epsilon", 1e-5))
    if not math.isclose(eps, LN_EPS, rel_tol=1e-6):
        raise _bad(node, f"has epsilon {eps:g}: multidev.nn's LayerNorm uses {LN_EPS:g}")
    gamma = _per_channel(node, r.const(node, 1, "scale"), rank, "scale")
    beta = r.optional(node, 2)
    beta = np.zeros_like(gamma) if beta is None else _per_channel(node, beta, rank, "bias")
    r.emit(node, LayerNorm(), [x], x[1], _hint(node, "ln", node.input[1]),
           r.weights(node, {"gamma": gamma, "beta": beta}))


def _activation(r: _Reader, node, attrs: dict) -> None:
    if _text(attrs.get("approximate", "none")) != "none":
        raise _bad(node, "is the tanh approximation: multidev.nn's GELU is the exact (erf) form")
    cls = {"Relu": ReLU, "Gelu": GELU, "Tanh": Tanh, "Sigmoid": Sigmoid}[node.op_type]
    x = r.value(node)
    r.emit(node, cls(), [x], x[1], _hint(node, cls.kind))


def _identity(r: _Reader, node, attrs: dict) -> None:
    r.values[node.output[0]] = r.value(node)


def _dropout(r: _Reader, node, attrs: dict) -> None:
    ratio = r.optional(node, 1)
    p = float(attrs.get("ratio", 0.5)) if ratio is None else float(ratio.reshape(-1)[0])
    x = r.value(node)
    r.emit(node, Dropout(float(str(np.float32(p)))), [x], x[1], _hint(node, "dropout"))  # 0.3, not 0.30000001


def _gap(r: _Reader, node, attrs: dict) -> None:
    r.emit(node, GlobalAvgPool(), [_image(r, node)], "gap", _hint(node, "gap"))


def _flatten(r: _Reader, node, attrs: dict) -> None:
    x = r.value(node)
    axis = int(attrs.get("axis", 1))
    if axis % _RANK[x[1]] != 1:
        raise _bad(node, f"flattens from axis {axis}: multidev.nn's Flatten keeps the batch axis alone (axis 1)")
    if x[1] == "gap":  # multidev's GlobalAvgPool already gives (N, C)
        r.values[node.output[0]] = (x[0], "feat")
    else:
        r.emit(node, Flatten(), [x], "feat", _hint(node, "flatten"))


def _reshape(r: _Reader, node, attrs: dict) -> None:
    v = node.input[1]
    shape = list(r.syms[v].reshape(-1)) if v in r.syms else list(r.const(node, 1, "shape").reshape(-1))
    if "?" in shape or "N" in shape[1:]:
        raise _bad(node, "reshapes to a shape computed from sizes other than the batch: multidev.nn reshapes only "
                         "to (N, -1), a Flatten")
    shape = [0 if d == "N" else int(d) for d in shape]
    if len(shape) != 2 or not (shape[1] == -1 and shape[0] >= 0 or shape[1] > 0 and shape[0] in (0, -1)):
        raise _bad(node, f"reshapes to {shape}: multidev.nn reshapes only to (N, -1), a Flatten")
    x = r.value(node)
    if x[1] == "img":
        index = r.emit(node, Flatten(), [x], "feat", _hint(node, "flatten"))
    else:
        r.values[node.output[0]] = (x[0], "feat")
        index = x[0]
    if shape[1] > 0:
        r.features.append((node, index, shape[1]))


def _shape(r: _Reader, node, attrs: dict) -> None:
    """The sizes of a value as a shape value: the batch "N", the rest unknown ("?"); torch's x.size(0)."""
    dims = np.array(["N"] + ["?"] * (_RANK[r.value(node)[1]] - 1), dtype=object)
    r.syms[node.output[0]] = dims[int(attrs.get("start", 0)):attrs.get("end")]


def _shape_arithmetic(r: _Reader, node, attrs: dict) -> None:
    """Gather, Unsqueeze, Squeeze, Cast and Concat of shape values: x.view(x.size(0), -1) as torch writes it."""
    ins = [r.syms.get(v, r.consts[v].astype(object) if v in r.consts else None) for v in node.input if v]
    if any(v is None for v in ins):
        raise _bad(node, f"is not supported by multidev.nn: supported ops are {SUPPORTED}")
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


def _concat(r: _Reader, node, attrs: dict) -> None:
    if any(v in r.syms for v in node.input):
        _shape_arithmetic(r, node, attrs)
        return
    inputs = [r.value(node, k) for k in range(len(node.input))]
    if len({layout for _, layout in inputs}) != 1:
        raise _bad(node, "joins values of different ranks")
    axis = int(attrs.get("axis", 1))
    if axis % _RANK[inputs[0][1]] != 1:
        raise _bad(node, f"joins along axis {axis}: multidev.nn's Concat joins channels (axis 1)")
    if len(inputs) == 1:
        r.values[node.output[0]] = inputs[0]
        return
    r.emit(node, Concat(), inputs, inputs[0][1], _hint(node, "concat"))


_READERS = {"Conv": _conv, "MaxPool": _pool, "AveragePool": _pool, "Gemm": _gemm, "MatMul": _matmul, "Add": _add,
            "Sum": _add, "BatchNormalization": _batchnorm, "LayerNormalization": _layernorm, "Relu": _activation,
            "Gelu": _activation, "Tanh": _activation, "Sigmoid": _activation, "Identity": _identity,
            "Dropout": _dropout, "GlobalAveragePool": _gap, "Flatten": _flatten, "Reshape": _reshape,
            "Concat": _concat, "Shape": _shape, "Gather": _shape_arithmetic, "Unsqueeze": _shape_arithmetic,
            "Squeeze": _shape_arithmetic, "Cast": _shape_arithmetic}


# reading ---------------------------------------------------------------------------------------------------
def _input(graph, consts: set[str]) -> tuple[str, str, Optional[Shape]]:
    """(name, layout, shape without the batch or None) of the graph's one input: images or features."""
    inputs = [i for i in graph.input if i.name not in consts]  # IR < 4 lists initializers as inputs too
    if len(inputs) != 1 or len(graph.output) != 1:
        raise MultidevError(f"the ONNX model has {len(inputs)} inputs and {len(graph.output)} outputs: multidev.nn "
                            f"reads models of one input (images or features) and one output (the logits)")
    t = inputs[0].type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if t.elem_type not in _FLOATS or len(dims) not in (2, 4):
        raise MultidevError(f"the ONNX model's input {inputs[0].name!r} is not floating-point images (N, C, H, W) "
                            f"or features (N, F) (rank {len(dims)}, type {t.elem_type})")
    shape = tuple(dims[1:]) if all(d for d in dims[1:]) else None
    return inputs[0].name, "img" if len(dims) == 4 else "feat", shape


def _kept(layers: list[_Layer], out: int) -> list[int]:
    """The layers the output depends on, in order (a dead branch is left out)."""
    keep, todo = set(), [out]
    while todo:
        i = todo.pop()
        if isinstance(i, int) and i not in keep:
            keep.add(i)
            todo.extend(layers[i].inputs)
    return sorted(keep)


def _check(graph: Graph, shape: Optional[Shape], features: list[tuple[Any, str, int]]) -> None:
    """The weights fit the layers for the file's input shape (when it is fixed); one line where not."""
    if shape is None:
        return
    shapes = graph.shapes(shape)
    for p in graph.params(shape):
        if tuple(graph.weights[p.name].shape) != p.shape:
            raise MultidevError(f"the ONNX model's {p.name} has shape {tuple(graph.weights[p.name].shape)}, "
                                f"its layer needs {p.shape} for inputs {shape}")
    for node, name, count in features:
        if shapes[name] != (count,):
            raise _bad(node, f"reshapes {shapes[name]} values per sample to {count}: multidev.nn reshapes only to "
                             f"(N, -1), a Flatten")
    if len(shapes[graph.nodes[-1].name]) != 1:
        raise MultidevError(f"the ONNX model gives {shapes[graph.nodes[-1].name]} per sample: multidev.nn needs "
                            f"logits (N, classes)")


def _without_normalization(onnx, model) -> Optional[Normalization]:
    """``model`` without the input normalisation ``multidev export`` writes first; its (means, stds).

    multidev.nn has no normalisation layer: the run does it (``--normalize``),
    so the network after it is what an exported file gives back to train on.
    """
    nodes = model.graph.node
    if len(nodes) < 2 or [n.name for n in nodes[:2]] != ["input.centre", "input.normalize"]:
        return None
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    mean, std = (tuple(consts[name].ravel().tolist()) for name in ("input.mean", "input.std"))
    normalized = nodes[1].output[0]
    del nodes[:2]
    for node in nodes:
        node.input[:] = ["input" if name == normalized else name for name in node.input]
    return mean, std


def normalization_line(graph: Graph) -> str:
    """What a user is told of a file that normalised its own input: the ``--normalize`` that feeds it alike."""
    numbers = lambda values: ",".join(f"{v:.6g}" for v in values)  # noqa: E731
    mean, std = graph.normalization  # type: ignore[misc]
    return (f"{graph.source} normalises its input itself; multidev.nn reads the network after that: train it "
            f"with --normalize {numbers(mean)}/{numbers(std)} to feed it what it was trained on")


def from_onnx(path: Union[str, os.PathLike], *, warn: bool = True) -> Graph:
    """The network of an ONNX file as a Graph, with its initializers as ``weights`` and ``source`` the path.

    One line (a MultidevError) for a missing or non-ONNX file, an op or an
    attribute value multidev.nn cannot express, naming the ONNX node. A file
    that normalises its input (as ``multidev export`` writes it) gives the
    network after that, with ``normalization`` set and (``warn``) one warning
    line naming the ``--normalize`` that feeds it alike.
    """
    onnx = _onnx()
    model = _load(Path(path))
    normalization = _without_normalization(onnx, model)
    reader = _Reader(onnx, model.graph)
    name, layout, shape = _input(model.graph, set(reader.consts))
    reader.values[name] = ("input", layout)
    reader.run()
    out = model.graph.output[0].name
    ref, out_layout = reader.values.get(out, (None, None))
    if not isinstance(ref, int) or out_layout == "img":
        what = "not computed" if ref is None else "its input" if ref == "input" else "images (N, C, H, W)"
        raise MultidevError(f"the ONNX model's output {out!r} is {what}: multidev.nn needs logits (N, classes)")
    keep = _kept(reader.layers, ref)
    name_of: dict[Ref, str] = {"input": "input", **dict(zip(keep, _names([reader.layers[i].hint for i in keep])))}
    nodes = tuple(NodeSpec(name_of[i], reader.layers[i].layer, tuple(name_of[j] for j in reader.layers[i].inputs))
                  for i in keep)
    weights = {f"{name_of[i]}.{p}": v for i in keep for p, v in reader.layers[i].params.items()}
    graph = Graph(nodes, weights, str(path), normalization)
    _check(graph, shape, [(n, name_of[i], c) for n, i, c in reader.features if i in name_of])
    if normalization is not None and warn:
        warnings.warn(normalization_line(graph), stacklevel=2)
    return graph


# writing ---------------------------------------------------------------------------------------------------
class _Writer:
    """The ONNX nodes and initializers of one graph, float32, named after the canonical names."""

    def __init__(self, onnx, opset: int, state: dict[str, np.ndarray], shapes: dict[str, Shape]) -> None:
        self.onnx, self.opset, self.state, self.shapes = onnx, opset, state, shapes
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    def init(self, node: NodeSpec, param: str, value: Optional[np.ndarray] = None) -> str:
        name = f"{node.name}.{param}"
        array = np.ascontiguousarray(self.state[name] if value is None else value, np.float32)
        self.inits.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def const(self, name: str, value: float) -> str:
        """A scalar Constant node: GELU's and Dropout's numbers are not weights, so not initializers."""
        tensor = self.onnx.numpy_helper.from_array(np.asarray(value, np.float32), name)
        self.nodes.append(self.onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        return name

    def add(self, op: str, inputs: list[str], output: str, name: str, **attrs: Any) -> None:
        self.nodes.append(self.onnx.helper.make_node(op, inputs, [output], name=name, **attrs))


def _normalized(w: _Writer, normalization: Normalization, rank: int) -> str:
    """(input - mean) / std per channel (feature), the run's own normalisation, as the graph's first nodes."""
    shape = (1, -1) + (1,) * (rank - 1)
    for part, values in zip(("mean", "std"), normalization):
        array = np.asarray(values, np.float32).reshape(shape)
        w.inits.append(w.onnx.numpy_helper.from_array(array, f"input.{part}"))
    w.add("Sub", ["input", "input.mean"], "input/centred", "input.centre")
    w.add("Div", ["input/centred", "input.std"], "input/normalized", "input.normalize")
    return "input/normalized"


def _w_conv(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    L = n.layer
    inputs = ins + [w.init(n, "weight")] + ([w.init(n, "bias")] if L.bias else [])
    w.add("Conv", inputs, out, n.name, kernel_shape=[L.kernel_size] * 2, strides=[L.stride] * 2,
          pads=[L.padding] * 4, dilations=[1, 1], group=1)


def _w_dense(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    inputs = ins + [w.init(n, "weight")] + ([w.init(n, "bias")] if n.layer.bias else [])
    w.add("Gemm", inputs, out, n.name, transB=1)


def _w_batchnorm(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    inputs = ins + [w.init(n, p) for p in ("gamma", "beta", "running_mean", "running_var")]
    w.add("BatchNormalization", inputs, out, n.name, epsilon=BN_EPS)  # inference: the running statistics


def _w_layernorm(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """ONNX's scale is per value of a sample: multidev's per-channel gamma and beta repeated over H and W."""
    if w.opset < 17:
        raise MultidevError(f"{n.layer.where(n.name)} needs ONNX opset 17 or newer (LayerNormalization): "
                            f"export with opset=17")
    shape = w.shapes[n.inputs[0]]
    per_value = [np.broadcast_to(w.state[f"{n.name}.{p}"].reshape((-1,) + (1,) * (len(shape) - 1)), shape)
                 for p in ("gamma", "beta")]
    w.add("LayerNormalization", ins + [w.init(n, "gamma", per_value[0]), w.init(n, "beta", per_value[1])], out,
          n.name, axis=1, epsilon=LN_EPS)


def _w_gelu(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """Gelu from opset 20; below, x * (1 + erf(x / sqrt 2)) * 0.5 as torch writes it (and from_onnx reads it)."""
    if w.opset >= 20:
        w.add("Gelu", ins, out, n.name)
        return
    p = n.name + "/"
    w.add("Div", ins + [w.const(p + "sqrt2", math.sqrt(2))], p + "scaled", p + "Div")
    w.add("Erf", [p + "scaled"], p + "erf", p + "Erf")
    w.add("Add", [p + "erf", w.const(p + "one", 1.0)], p + "cdf2", p + "Add")
    w.add("Mul", ins + [p + "cdf2"], p + "twice", p + "Mul")
    w.add("Mul", [p + "twice", w.const(p + "half", 0.5)], out, p + "Mul_1")


def _w_pool(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    op = "MaxPool" if type(n.layer) is MaxPool2d else "AveragePool"
    w.add(op, ins, out, n.name, kernel_shape=[n.layer.kernel_size] * 2, strides=[n.layer.step] * 2,
          pads=[0, 0, 0, 0])


def _w_gap(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("GlobalAveragePool", ins, n.name + "/pooled", n.name)
    w.add("Flatten", [n.name + "/pooled"], out, n.name + "/Flatten", axis=1)  # (N, C, 1, 1) to multidev's (N, C)


def _w_dropout(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Dropout", ins + [w.const(n.name + "/ratio", n.layer.p)], out, n.name)  # no training_mode: identity


def _w_simple(op: str, **attrs: Any):
    def write(w: _Writer, n: NodeSpec, ins: list[str], out: str) -> None:
        w.add(op if op != "Add" or len(ins) == 2 else "Sum", ins, out, n.name, **attrs)
    return write


_WRITERS = {Conv2d: _w_conv, Dense: _w_dense, BatchNorm: _w_batchnorm, LayerNorm: _w_layernorm, GELU: _w_gelu,
            MaxPool2d: _w_pool, AvgPool2d: _w_pool, GlobalAvgPool: _w_gap, Dropout: _w_dropout,
            ReLU: _w_simple("Relu"), Tanh: _w_simple("Tanh"), Sigmoid: _w_simple("Sigmoid"),
            Flatten: _w_simple("Flatten", axis=1), Add: _w_simple("Add"), Concat: _w_simple("Concat", axis=1)}


def _checked(graph: Any, state: dict[str, np.ndarray], in_shape: Shape) -> Graph:
    """The definition as a Graph (its open last Dense as wide as the state's), ``state`` checked against it."""
    graph = graph.graph if isinstance(getattr(graph, "graph", None), Graph) else graph.graph()  # a ModelSpec too
    last = state.get(f"{graph.nodes[-1].name}.weight")
    graph = graph.resolved(int(last.shape[0]) if last is not None and np.ndim(last) == 2 else None)
    params = graph.params(tuple(in_shape))
    missing = [p.name for p in params if p.name not in state]
    if missing:
        raise MultidevError(f"the state has no {', '.join(missing[:3])}: give the model's whole state")
    for p in params:
        if tuple(np.shape(state[p.name])) != p.shape:
            raise MultidevError(f"{p.name} has shape {tuple(np.shape(state[p.name]))}, the model needs {p.shape}")
    for node in graph.nodes:
        if type(node.layer) not in _WRITERS:
            raise MultidevError(f"{node.layer.where(node.name)} has no ONNX form here: upgrade multidev")
    return graph


def to_onnx(graph: Any, state: dict[str, np.ndarray], in_shape: Shape, path: Union[str, os.PathLike],
            opset: int = DEFAULT_OPSET, *, normalization: Optional[Normalization] = None,
            classes: Optional[Sequence[str]] = None) -> str:
    """Writes the model for inference as ONNX (float32): input "input" (N, *in_shape), output "logits" (N, K).

    Why this form: any ONNX runtime serves it. The batch axis is dynamic;
    BatchNorm uses the running statistics, Dropout is an identity. ``graph``:
    a Graph, a definition or a ModelSpec. ``normalization`` ((means, stds)
    per channel, as the run applied them; what ``from_onnx`` gives back as
    ``Graph.normalization``) becomes the file's first nodes, so it takes
    samples as the data set holds them; ``classes`` (the labels' names, in
    order) goes into its metadata as JSON. Checked by onnx.checker (shapes
    included), written atomically; returns the path.
    """
    onnx = _onnx()
    if not MIN_WRITE_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise MultidevError(f"ONNX opset {opset} cannot be written: choose {MIN_WRITE_OPSET} to "
                            f"{onnx.defs.onnx_opset_version()} (default {DEFAULT_OPSET})")
    graph = _checked(graph, state, in_shape)
    shapes = graph.shapes(tuple(in_shape))
    writer = _Writer(onnx, opset, state, shapes)
    last = graph.nodes[-1].name
    value = {n.name: "logits" if n.name == last else n.name + ("/out" if n.name == "logits" else "")
             for n in graph.nodes}
    value["input"] = _normalized(writer, normalization, len(in_shape)) if normalization else "input"
    for n in graph.nodes:
        _WRITERS[type(n.layer)](writer, n, [value[i] for i in n.inputs], value[n.name])
    h, f32 = onnx.helper, onnx.TensorProto.FLOAT
    io = ([h.make_tensor_value_info("input", f32, ["N", *map(int, in_shape)])],
          [h.make_tensor_value_info("logits", f32, ["N", *shapes[last]])])
    opsets = [h.make_opsetid("", opset)]
    model = h.make_model(h.make_graph(writer.nodes, "multidev", *io, writer.inits), opset_imports=opsets,
                         producer_name="multidev", ir_version=h.find_min_ir_version_for(opsets))
    if classes:
        h.set_model_props(model, {"classes": json.dumps(list(classes))})
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise MultidevError(f"the ONNX model written for {last!r} does not check: {first_line(exc)}") from None
    with atomic_write(path, what="ONNX file") as f:
        f.write(model.SerializeToString())
    return str(Path(path))
