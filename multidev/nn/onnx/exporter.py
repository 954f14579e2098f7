"""``to_onnx``: a Graph and its state written as an ONNX file for inference, by the writer registered for each
layer (float32; the batch axis dynamic; checked by onnx.checker, shapes included)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from multidev.errors import MultidevError, first_line
from multidev.nn.graph import Graph, Normalization
from multidev.nn.layers import Shape
from multidev.nn.onnx import (ops_activations, ops_attention, ops_linear, ops_norms, ops_shapes, ops_slices,
                              ops_swin, ops_tokens, ops_windows)
from multidev.nn.onnx.base import DEFAULT_OPSET, MIN_WRITE_OPSET, WRITERS, onnx_module
from multidev.nn.onnx.writer import Writer
from multidev.outputs.files import atomic_write

#: the modules whose writers the registry holds once they are imported
OP_MODULES = (ops_activations, ops_attention, ops_linear, ops_norms, ops_shapes, ops_slices, ops_swin, ops_tokens,
              ops_windows)


def _normalized(w: Writer, normalization: Normalization, rank: int) -> str:
    """(input - mean) / std per channel (feature), the run's own normalisation, as the graph's first nodes."""
    shape = (1, -1) + (1,) * (rank - 1)
    for part, values in zip(("mean", "std"), normalization):
        array = np.asarray(values, np.float32).reshape(shape)
        w.inits.append(w.onnx.numpy_helper.from_array(array, f"input.{part}"))
    w.add("Sub", ["input", "input.mean"], "input/centred", "input.centre")
    w.add("Div", ["input/centred", "input.std"], "input/normalized", "input.normalize")
    return "input/normalized"


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
        if type(node.layer) not in WRITERS:
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
    onnx = onnx_module()
    if not MIN_WRITE_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise MultidevError(f"ONNX opset {opset} cannot be written: choose {MIN_WRITE_OPSET} to "
                            f"{onnx.defs.onnx_opset_version()} (default {DEFAULT_OPSET})")
    graph = _checked(graph, state, in_shape)
    shapes = graph.shapes(tuple(in_shape))
    writer = Writer(onnx, opset, state, shapes)
    last = graph.nodes[-1].name
    value = {n.name: "logits" if n.name == last else n.name + ("/out" if n.name == "logits" else "")
             for n in graph.nodes}
    value["input"] = _normalized(writer, normalization, len(in_shape)) if normalization else "input"
    for n in graph.nodes:
        WRITERS[type(n.layer)](writer, n, [value[i] for i in n.inputs], value[n.name])
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
