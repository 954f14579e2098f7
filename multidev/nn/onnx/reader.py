"""One pass over an ONNX graph's nodes, each mapped onto a layer by the reader registered for its op.

The pass tracks what each ONNX value is: the input or a layer's output, and
its kind (``base.rank``): images (N, C, H, W), features (N, F), "gap", a
pooled (N, C, 1, 1) that multidev holds as (N, C) because only a Flatten
reads it, or "r3", "r5"... for other ranks; and, where the file's input has
a fixed size, each layer's sample shape. Constants are folded before and
during the pass (``constants``: shape arithmetic), nodes nothing reads are
left out, and patterns (several nodes that make one layer, as GELU's erf
form) are found before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn.layers import Layer, Shape
from multidev.nn.onnx import base
from multidev.nn.onnx.base import Ref, bad, rank
from multidev.nn.onnx.constants import MOVES, fold, symbolic
from multidev.nn.onnx.naming import Hint, hint

Value = tuple[Ref, str]  # (layer index or "input", kind)


@dataclass
class Emitted:
    layer: Layer
    inputs: tuple[Ref, ...]
    hint: Hint
    params: dict[str, np.ndarray] = field(default_factory=dict)


class Reader:
    """The pass's state: constants, values, the layers so far, and what the checks after the pass need."""

    def __init__(self, onnx, graph, opset: int = base.DEFAULT_OPSET) -> None:
        self.onnx, self.graph, self.opset = onnx, graph, opset
        self.consts: dict[str, np.ndarray] = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
        self.inits = set(self.consts)  # the file's weights, as against Constant nodes
        self.values: dict[str, Value] = {}  # ONNX value -> (layer or "input", kind)
        self.shapes: dict[Ref, Optional[Shape]] = {}  # layer -> its sample shape, where the input's is fixed
        self.batch: Optional[int] = None  # the file's batch size, where it is fixed (torch's default export)
        self.layers: list[Emitted] = []
        self.readers: dict[str, list[int]] = {}  # ONNX value -> the nodes reading it (-1: a graph output)
        for i, node in enumerate(graph.node):
            for name in node.input:
                self.readers.setdefault(name, []).append(i)
        for out in graph.output:
            self.readers.setdefault(out.name, []).append(-1)
        self.producer = {v: i for i, node in enumerate(graph.node) for v in node.output}
        self.skip: set[int] = set()
        self.dead: set[int] = set()  # nodes nothing reads on the way to the output
        self.fused: dict[int, tuple[Layer, str, Any]] = {}  # a pattern's last node -> (its layer, its x, hint node)
        self.features: list[tuple[Any, Ref, int]] = []  # (Reshape node, layer, features its shape asks for)
        self.lower: list[tuple[Any, Ref]] = []  # (node, layer) of SAME_LOWER padding, checked at the input's size
        self.origin: dict[str, str] = {}  # a weight moved by Transpose, Reshape... -> its initializer's name
        self.syms: dict[str, np.ndarray] = {}  # shape values: ints, "N" (the batch) or "?" (any other size)
        self.tokens: dict[str, np.ndarray] = {}  # a learned (1, 1, D) expanded to the batch: a class token

    def start(self, name: str, kind: str, shape: Optional[Shape], batch: Optional[int]) -> None:
        """The graph's input: its kind, its sample shape and batch size where the file fixes them."""
        self.values[name] = ("input", kind)
        self.shapes["input"], self.batch = shape, batch

    # values ---------------------------------------------------------------------------------------------
    def const(self, node, k: int, what: str) -> np.ndarray:
        name = node.input[k] if k < len(node.input) else ""
        if name not in self.consts:
            raise bad(node, f"takes its {what} from {'a computed value ' + repr(name) if name else 'nowhere'}: "
                            f"multidev.nn needs it as an initializer")
        return self.consts[name]

    def optional(self, node, k: int) -> Optional[np.ndarray]:
        return self.consts.get(node.input[k]) if k < len(node.input) and node.input[k] else None

    def known(self, name: str) -> Optional[np.ndarray]:
        """A constant or a shape value (its batch "N", its unknown sizes "?"), or None."""
        return self.consts.get(name, self.syms.get(name))

    def value(self, node, k: int = 0) -> Value:
        name = node.input[k]
        if name in self.consts:
            raise bad(node, f"takes the constant {name!r} as input {k}: multidev.nn's layers take computed values")
        if name not in self.values:
            raise bad(node, f"reads {name!r}, which multidev.nn does not compute (a second input, or an output "
                            f"it leaves out)")
        return self.values[name]

    def image(self, node, k: int = 0) -> Value:
        ref = self.value(node, k)
        if ref[1] != "img":
            what = {"feat": "features", "gap": "pooled (N, C, 1, 1) values"}.get(ref[1], f"values of rank "
                                                                                      f"{rank(ref[1])}")
            raise bad(node, f"takes {what}: multidev.nn applies it to images (N, C, H, W)")
        return ref

    def shape(self, x: Value) -> Optional[Shape]:
        """The sample shape multidev holds for ``x``, where the file's input size is fixed."""
        return self.shapes.get(x[0])

    def onnx_shape(self, x: Value) -> Optional[Shape]:
        """``x``'s sample shape as ONNX has it: a pooled (C,) is (C, 1, 1) there."""
        shape = self.shape(x)
        return shape + (1, 1) if shape is not None and x[1] == "gap" else shape

    def axis(self, node, axis: int, x: Value, what: str) -> int:
        """ONNX's ``axis`` of ``x`` as the sample's (the batch left out; one from the end stays from the end)."""
        n = rank(x[1])
        if not -n <= axis < n:
            raise bad(node, f"{what} along axis {axis} of a value of rank {n}")
        if axis % n == 0:
            raise bad(node, f"{what} along the batch axis: multidev.nn's layers take each sample alone and keep "
                            f"the batch first")
        return axis - 1 if axis > 0 else axis

    def make(self, node, cls: type, *args: Any, **kwargs: Any) -> Layer:
        """``cls(*args, **kwargs)``; hyperparameters the layer refuses are one line naming the node."""
        try:
            return cls(*args, **kwargs)
        except MultidevError as exc:
            raise bad(node, f"does not fit multidev.nn's {cls.__name__}: {exc}") from None

    def emit(self, node, layer: Layer, inputs: list[Value], kind: str, name: Hint,
             params: Optional[dict[str, np.ndarray]] = None, out: Optional[str] = None) -> int:
        """Adds ``layer`` reading ``inputs``, as ONNX value ``out`` (the node's first output by default)."""
        shapes = [self.shapes.get(r) for r, _ in inputs]
        shape = None
        if all(s is not None for s in shapes):
            try:
                shape = layer.infer(node.name or node.output[0], shapes)  # type: ignore[arg-type]
            except MultidevError as exc:
                raise bad(node, f"cannot be read as multidev.nn's {type(layer).__name__}: {exc}") from None
        self.layers.append(Emitted(layer, tuple(r for r, _ in inputs), name, params or {}))
        self.shapes[len(self.layers) - 1] = shape
        self.values[out or node.output[0]] = (len(self.layers) - 1, kind)
        return len(self.layers) - 1

    def weights(self, node, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, array in arrays.items():
            if array.dtype.kind != "f":
                raise bad(node, f"has {name} of type {array.dtype}: multidev.nn's weights are floating point")
        return {k: np.array(v) for k, v in arrays.items()}

    def named(self, name: str) -> str:
        """The initializer a constant came from (through Transpose, Reshape...), else its own name."""
        return self.origin.get(name, name)

    # the graph's structure ------------------------------------------------------------------------------
    def only_reader(self, value: str) -> Optional[int]:
        readers = [i for i in self.readers.get(value, []) if i not in self.skip or i < 0]
        return readers[0] if len(readers) == 1 and readers[0] >= 0 else None

    def op(self, i: Optional[int], op_type: str, reads: Optional[str] = None):
        """Node ``i`` when it is an ``op_type`` (reading ``reads``), else None: one step of a pattern."""
        node = self.graph.node[i] if i is not None else None
        ok = node is not None and node.op_type == op_type and (reads is None or reads in node.input)
        return node if ok else None

    def others(self, node, value: str) -> list[str]:
        return [v for v in node.input if v != value]

    def attrs(self, node) -> dict:
        return {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}

    # the pass -------------------------------------------------------------------------------------------
    def folded(self, i: int, node) -> bool:
        """Folds node ``i`` where every input is known (``constants``); its outputs become constants or shape
        values. A weight moved (Transpose, Reshape...) keeps its initializer's name for the layer's."""
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return False
        if node.op_type == "Constant":
            self.consts[node.output[0]] = self.constant(node)
            return True
        ins = [self.known(v) if v else None for v in node.input]
        if not node.input or any(v is None for v, name in zip(ins, node.input) if name):
            return False
        out = fold(node.op_type, ins, self.attrs(node), self.opset)
        if out is None:
            return False
        (self.syms if symbolic(out) else self.consts)[node.output[0]] = out
        if node.op_type == "Identity" and node.input[0] in self.inits:
            self.inits.add(node.output[0])  # a weight's copy, named as the layer that uses it
        elif node.op_type in MOVES and (node.input[0] in self.inits or node.input[0] in self.origin):
            self.origin[node.output[0]] = self.named(node.input[0])
        return True

    def constant(self, node) -> np.ndarray:
        attrs = self.attrs(node)
        if "value" in attrs:
            return self.onnx.numpy_helper.to_array(attrs["value"])
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                           ("value_ints", np.int64)):
            if key in attrs:
                return np.asarray(attrs[key], dtype)
        raise bad(node, f"holds a {', '.join(attrs) or 'missing'} value: multidev.nn reads tensors and numbers")

    def prune(self) -> None:
        """Nodes whose outputs nothing reads on the way to the graph's output are left out."""
        live = {o.name for o in self.graph.output}
        for i in range(len(self.graph.node) - 1, -1, -1):
            node = self.graph.node[i]
            if any(v in live for v in node.output):
                live.update(v for v in node.input if v)
            else:
                self.dead.add(i)
        self.skip |= self.dead

    def run(self) -> None:
        self.prune()
        for i, node in enumerate(self.graph.node):
            if i not in self.skip and self.folded(i, node):
                self.skip.add(i)
        for find in base.PATTERNS:
            find(self)
        for i, node in enumerate(self.graph.node):
            if i in self.skip or self.folded(i, node):
                continue
            self.read(i, node)

    def read(self, i: int, node) -> None:
        if node.op_type not in base.MULTI:
            for out in node.output[1:]:
                if out and self.readers.get(out):
                    raise bad(node, f"has its output {out!r} read: multidev.nn computes only its first output")
        if i in self.fused:
            layer, x, at = self.fused[i]
            if x not in self.values:
                raise bad(at, f"reads {x!r}, which multidev.nn does not compute")
            self.emit(node, layer, [self.values[x]], self.values[x][1], hint(at, layer.kind))
            return
        ours = node.domain in ("", "ai.onnx")
        if ours and any(find(self, node) for find in base.FIRST.get(node.op_type, ())):
            return
        handler = base.READERS.get(node.op_type) if ours else None
        if handler is None:
            why = base.WHY_NOT.get(node.op_type) if ours else None
            raise bad(node, f"is not supported by multidev.nn: {why + '; ' if why else ''}supported ops are "
                            f"{base.supported()}")
        handler(self, node, self.attrs(node))
