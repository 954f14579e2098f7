"""One pass over an ONNX graph's nodes, each mapped onto a layer by the reader registered for its op.

The pass tracks what each ONNX value is: the input or a layer's output, and
its kind (``base.RANK``): images (N, C, H, W), features (N, F), or "gap", a
pooled (N, C, 1, 1) that multidev holds as (N, C) because only a Flatten
reads it. Constants are folded before the pass; patterns (several nodes that
make one layer, as GELU's erf form) are found before it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn.layers import Layer
from multidev.nn.onnx import base
from multidev.nn.onnx.base import Ref, bad
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

    def __init__(self, onnx, graph) -> None:
        self.onnx, self.graph = onnx, graph
        self.consts: dict[str, np.ndarray] = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
        self.values: dict[str, Value] = {}  # ONNX value -> (layer or "input", kind)
        self.layers: list[Emitted] = []
        self.readers: dict[str, list[int]] = {}  # ONNX value -> the nodes reading it (-1: a graph output)
        for i, node in enumerate(graph.node):
            for name in node.input:
                self.readers.setdefault(name, []).append(i)
        for out in graph.output:
            self.readers.setdefault(out.name, []).append(-1)
        self.producer = {v: i for i, node in enumerate(graph.node) for v in node.output}
        self.skip: set[int] = set()
        self.fused: dict[int, tuple[Layer, str, Any]] = {}  # a pattern's last node -> (its layer, its x, hint node)
        self.features: list[tuple[Any, Ref, int]] = []  # (Reshape node, layer, features its shape asks for)
        self.lower: list[tuple[Any, Ref]] = []  # (node, layer) of SAME_LOWER padding, checked at the input's size
        self.origin: dict[str, str] = {}  # a transposed weight -> the initializer it came from (its name)
        self.syms: dict[str, np.ndarray] = {}  # shape values: ints, "N" (the batch) or "?" (any other size)

    # values ---------------------------------------------------------------------------------------------
    def const(self, node, k: int, what: str) -> np.ndarray:
        name = node.input[k] if k < len(node.input) else ""
        if name not in self.consts:
            raise bad(node, f"takes its {what} from {'a computed value ' + repr(name) if name else 'nowhere'}: "
                            f"multidev.nn needs it as an initializer")
        return self.consts[name]

    def optional(self, node, k: int) -> Optional[np.ndarray]:
        return self.consts.get(node.input[k]) if k < len(node.input) and node.input[k] else None

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
            raise bad(node, f"takes {'features' if ref[1] == 'feat' else 'pooled (N, C, 1, 1) values'}: "
                            f"multidev.nn applies it to images (N, C, H, W)")
        return ref

    def make(self, node, cls: type, *args: Any, **kwargs: Any) -> Layer:
        """``cls(*args, **kwargs)``; hyperparameters the layer refuses are one line naming the node."""
        try:
            return cls(*args, **kwargs)
        except MultidevError as exc:
            raise bad(node, f"does not fit multidev.nn's {cls.__name__}: {exc}") from None

    def emit(self, node, layer: Layer, inputs: list[Value], kind: str, name: Hint,
             params: Optional[dict[str, np.ndarray]] = None) -> int:
        self.layers.append(Emitted(layer, tuple(r for r, _ in inputs), name, params or {}))
        self.values[node.output[0]] = (len(self.layers) - 1, kind)
        return len(self.layers) - 1

    def weights(self, node, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, array in arrays.items():
            if array.dtype.kind != "f":
                raise bad(node, f"has {name} of type {array.dtype}: multidev.nn's weights are floating point")
        return {k: np.array(v) for k, v in arrays.items()}

    # the graph's structure ------------------------------------------------------------------------------
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

    # the pass -------------------------------------------------------------------------------------------
    def fold(self) -> None:
        """Constants folded: Constant; Identity or Transpose of a constant (torch's Linear(bias=False))."""
        for i, node in enumerate(self.graph.node):
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                self.consts[node.output[0]] = self.constant(node)
                self.skip.add(i)
            elif node.op_type in ("Identity", "Transpose") and node.domain in ("", "ai.onnx") \
                    and node.input[0] in self.consts:
                value = self.consts[node.input[0]]
                if node.op_type == "Transpose":
                    perm = [a.ints for a in node.attribute if a.name == "perm"]
                    value = np.transpose(value, list(perm[0]) if perm else None)
                    self.origin[node.output[0]] = self.origin.get(node.input[0], node.input[0])
                self.consts[node.output[0]] = value
                self.skip.add(i)

    def constant(self, node) -> np.ndarray:
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        if "value" in attrs:
            return self.onnx.numpy_helper.to_array(attrs["value"])
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                           ("value_ints", np.int64)):
            if key in attrs:
                return np.asarray(attrs[key], dtype)
        raise bad(node, f"holds a {', '.join(attrs) or 'missing'} value: multidev.nn reads tensors and numbers")

    def run(self) -> None:
        self.fold()
        for find in base.PATTERNS:
            find(self)
        for i, node in enumerate(self.graph.node):
            if i in self.skip:
                continue
            for out in node.output[1:]:
                if out and self.readers.get(out):
                    raise bad(node, f"has its output {out!r} read: multidev.nn computes only its first output")
            if i in self.fused:
                layer, x, at = self.fused[i]
                if x not in self.values:
                    raise bad(at, f"reads {x!r}, which multidev.nn does not compute")
                self.emit(node, layer, [self.values[x]], self.values[x][1], hint(at, layer.kind))
                continue
            handler = base.READERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            if handler is None:
                raise bad(node, f"is not supported by multidev.nn: supported ops are {base.supported()}")
            handler(self, node, {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute})
