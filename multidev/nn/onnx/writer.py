"""The ONNX nodes and initializers of one graph being written: what each layer's writer adds to."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import Shape


class Writer:
    """Nodes and initializers, float32, named after the canonical names; the shapes of every node's output."""

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
        """A scalar Constant node: GELU's, Clip's and Dropout's numbers are not weights, so not initializers."""
        tensor = self.onnx.numpy_helper.from_array(np.asarray(value, np.float32), name)
        self.nodes.append(self.onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        return name

    def ints(self, name: str, values) -> str:
        """An int64 Constant node (a shape, axes, a Slice's bounds)."""
        tensor = self.onnx.numpy_helper.from_array(np.asarray(values, np.int64), name)
        self.nodes.append(self.onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        return name

    def tensor(self, name: str, value: np.ndarray) -> str:
        """A float32 Constant node of any shape: numbers that are not weights (a LayerNorm's scale of ones)."""
        tensor = self.onnx.numpy_helper.from_array(np.asarray(value, np.float32), name)
        self.nodes.append(self.onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        return name

    def add(self, op: str, inputs: list[str], output: str, name: str, **attrs: Any) -> None:
        self.nodes.append(self.onnx.helper.make_node(op, inputs, [output], name=name, **attrs))
