"""``from_onnx``: an ONNX file as a ``multidev.nn`` Graph, with its initializers as the weights.

Reading parses the file with the ``onnx`` package (protobuf data, checked by
``onnx.checker``: no code of the file runs), maps each node onto a layer by
the reader registered for its op, then checks the layers against the file's
input shape where it is fixed.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Optional, Union

from multidev.errors import MultidevError, first_line
from multidev.nn import windows as W
from multidev.nn.graph import Graph, NodeSpec, Normalization
from multidev.nn.layers import Shape
from multidev.nn.onnx import (ops_activations, ops_attention, ops_linear, ops_norms, ops_shapes, ops_slices,
                              ops_swin, ops_tokens, ops_windows, patterns)
from multidev.nn.onnx.base import FLOATS, MIN_OPSET, Ref, bad, kind, onnx_module, rank
from multidev.nn.onnx.naming import names
from multidev.nn.onnx.reader import Emitted, Reader

#: the modules whose readers and patterns the registry holds once they are imported
OP_MODULES = (ops_activations, ops_attention, ops_linear, ops_norms, ops_shapes, ops_slices, ops_swin, ops_tokens,
              ops_windows, patterns)


def _load(path: Path):
    """The checked model of ``path``; a missing file, a non-ONNX file or an unread opset is one line."""
    onnx = onnx_module()
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


def _input(graph, consts: set[str]) -> tuple[str, str, Optional[Shape], Optional[int]]:
    """(name, kind, shape without the batch or None, batch size or None) of the graph's one input: images,
    features, tokens..."""
    inputs = [i for i in graph.input if i.name not in consts]  # IR < 4 lists initializers as inputs too
    if len(inputs) != 1 or len(graph.output) != 1:
        raise MultidevError(f"the ONNX model has {len(inputs)} inputs and {len(graph.output)} outputs: multidev.nn "
                            f"reads models of one input (images or features) and one output (the logits)")
    t = inputs[0].type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if t.elem_type not in FLOATS or len(dims) < 2:
        raise MultidevError(f"the ONNX model's input {inputs[0].name!r} is not floating-point samples with a "
                            f"batch axis first (rank {len(dims)}, type {t.elem_type}): multidev.nn reads images "
                            f"(N, C, H, W), features (N, F) and other values of rank 2 or more")
    shape = tuple(dims[1:]) if all(d for d in dims[1:]) else None
    return inputs[0].name, kind(len(dims)), shape, dims[0] or None


def _kept(layers: list[Emitted], out: int) -> list[int]:
    """The layers the output depends on, in order (a dead branch is left out)."""
    keep, todo = set(), [out]
    while todo:
        i = todo.pop()
        if isinstance(i, int) and i not in keep:
            keep.add(i)
            todo.extend(layers[i].inputs)
    return sorted(keep)


def _lower(graph: Graph, shapes: dict[str, Shape], lower: list[tuple[Any, str]]) -> None:
    """SAME_LOWER puts an odd row or column of padding at the top or left, multidev's "same" at the bottom or
    right: read as "same" only where the padding at the file's input size is even on every axis."""
    specs = {n.name: n for n in graph.nodes}
    for node, name in lower:
        layer, x = specs[name].layer, shapes[specs[name].inputs[0]]
        top, bottom, left, right = W.sides("same", x[1:], layer.kernel_size, getattr(layer, "stride", None)
                                           or layer.kernel_size, getattr(layer, "dilation", 1))
        if (top, left) != (bottom, right):
            raise bad(node, f"has auto_pad SAME_LOWER, which pads {x[1]}x{x[2]} inputs by (top {bottom}, bottom "
                            f"{top}, left {right}, right {left}): multidev.nn's 'same' puts the odd row and column "
                            f"at the bottom and right (SAME_UPPER); export with explicit pads")


def _check(graph: Graph, shape: Optional[Shape], r: Reader, name_of: dict[Ref, str]) -> None:
    """The weights fit the layers for the file's input shape (when it is fixed); one line where not."""
    lower = [(node, name_of[i]) for node, i in r.lower if i in name_of]
    if shape is None:
        if lower:
            raise bad(lower[0][0], "has auto_pad SAME_LOWER and the file's input has no fixed size: multidev.nn "
                                   "cannot tell whether its padding is symmetric; export with explicit pads")
        return
    shapes = graph.shapes(shape)
    for p in graph.params(shape):
        if tuple(graph.weights[p.name].shape) != p.shape:
            raise MultidevError(f"the ONNX model's {p.name} has shape {tuple(graph.weights[p.name].shape)}, "
                                f"its layer needs {p.shape} for inputs {shape}")
    for node, i, count in r.features:
        if i in name_of and shapes[name_of[i]] != (count,):
            raise bad(node, f"reshapes {shapes[name_of[i]]} values per sample to {count}: multidev.nn reshapes "
                            f"only to (N, -1), a Flatten")
    _lower(graph, shapes, lower)
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
    line naming the ``--normalize`` that feeds it alike. A BatchNormalization
    exported in training mode reads as BatchNorm with one warning line.
    """
    onnx = onnx_module()
    model = _load(Path(path))
    normalization = _without_normalization(onnx, model)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    reader = Reader(onnx, model.graph, opset)
    name, in_kind, shape, batch = _input(model.graph, set(reader.consts))
    reader.start(name, in_kind, shape, batch)
    reader.run()
    out = model.graph.output[0].name
    ref, out_kind = reader.values.get(out, (None, None))
    if not isinstance(ref, int) or out_kind not in ("feat", "gap"):
        what = "not computed" if ref is None else "its input" if ref == "input" else \
            "images (N, C, H, W)" if out_kind == "img" else f"of rank {rank(out_kind)}"
        raise MultidevError(f"the ONNX model's output {out!r} is {what}: multidev.nn needs logits (N, classes)")
    keep = _kept(reader.layers, ref)
    name_of: dict[Ref, str] = {"input": "input", **dict(zip(keep, names([reader.layers[i].hint for i in keep])))}
    nodes = tuple(NodeSpec(name_of[i], reader.layers[i].layer, tuple(name_of[j] for j in reader.layers[i].inputs))
                  for i in keep)
    weights = {f"{name_of[i]}.{p}": v for i in keep for p, v in reader.layers[i].params.items()}
    graph = Graph(nodes, weights, str(path), normalization)
    _check(graph, shape, reader, name_of)
    if normalization is not None and warn:
        warnings.warn(normalization_line(graph), stacklevel=2)
    return graph

