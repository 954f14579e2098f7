"""Normalisation: BatchNormalization (its epsilon and momentum; a training-mode export read as what it is) and
LayerNormalization over each whole sample."""

from __future__ import annotations

import warnings

import numpy as np

from multidev.errors import MultidevError
from multidev.nn.graph import NodeSpec
from multidev.nn.layers import BatchNorm, LayerNorm
from multidev.nn.onnx.base import RANK, bad, complement, decimal, reads, where, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader
from multidev.nn.onnx.writer import Writer


@reads("BatchNormalization")
def _batchnorm(r: Reader, node, attrs: dict) -> None:
    """ONNX's momentum is the running statistics' share (0.9), torch's and multidev's the batch's (0.1).

    ``training_mode`` 1 (torch's export in TrainingMode.TRAINING) normalises
    with the batch's statistics: that is what multidev's BatchNorm does in
    training, and it uses the running ones in inference as torch's module
    does, so the file reads as the same layer, with a warning that says so.
    """
    names = ("gamma", "beta", "running_mean", "running_var")
    arrays = {n: r.const(node, k, n) for k, n in enumerate(names, start=1)}
    if any(a.ndim != 1 for a in arrays.values()):
        raise bad(node, "has statistics that are not one per channel")
    layer = r.make(node, BatchNorm, eps=decimal(attrs.get("epsilon", 1e-5)),
                   momentum=complement(attrs.get("momentum", 0.9)))
    if int(attrs.get("training_mode", 0)):
        warnings.warn(f"{where(node)} has training_mode 1 (exported in training mode): multidev.nn reads it as "
                      f"BatchNorm, which uses the batch's statistics in training and the running ones in inference",
                      stacklevel=4)
    x = r.value(node)
    r.emit(node, layer, [x], x[1], hint(node, "bn", node.input[1]), r.weights(node, arrays))


def _per_channel(node, array: np.ndarray, rank: int, what: str) -> np.ndarray:
    """A LayerNorm scale as one value per channel: ONNX's is per value of the sample, multidev's per channel."""
    if array.ndim == rank - 1 and rank > 2:
        flat = array.reshape(array.shape[0], -1)
        if np.all(flat == flat[:, :1]):
            return flat[:, 0].copy()
    elif array.ndim == 1 and rank == 2:
        return array
    raise bad(node, f"has a {what} of shape {array.shape} that varies within a channel: multidev.nn's LayerNorm "
                    f"has one per channel")


@reads("LayerNormalization", note="over each whole sample")
def _layernorm(r: Reader, node, attrs: dict) -> None:
    x = r.value(node)
    rank = RANK[x[1]]
    axis = int(attrs.get("axis", -1))
    if axis % rank != 1:
        raise bad(node, f"normalises from axis {axis}: multidev.nn's LayerNorm normalises each whole sample "
                        f"(axis 1)")
    gamma = _per_channel(node, r.const(node, 1, "scale"), rank, "scale")
    beta = r.optional(node, 2)
    beta = np.zeros_like(gamma) if beta is None else _per_channel(node, beta, rank, "bias")
    layer = r.make(node, LayerNorm, eps=decimal(attrs.get("epsilon", 1e-5)))
    r.emit(node, layer, [x], x[1], hint(node, "ln", node.input[1]), r.weights(node, {"gamma": gamma, "beta": beta}))


@writes(BatchNorm)
def _w_batchnorm(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """For inference: the running statistics (no training_mode); momentum as ONNX counts it."""
    inputs = ins + [w.init(n, p) for p in ("gamma", "beta", "running_mean", "running_var")]
    w.add("BatchNormalization", inputs, out, n.name, epsilon=n.layer.eps, momentum=1.0 - n.layer.momentum)


@writes(LayerNorm)
def _w_layernorm(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """ONNX's scale is per value of a sample: multidev's per-channel gamma and beta repeated over H and W."""
    if w.opset < 17:
        raise MultidevError(f"{n.layer.where(n.name)} needs ONNX opset 17 or newer (LayerNormalization): "
                            f"export with opset=17")
    shape = w.shapes[n.inputs[0]]
    per_value = [np.broadcast_to(w.state[f"{n.name}.{p}"].reshape((-1,) + (1,) * (len(shape) - 1)), shape)
                 for p in ("gamma", "beta")]
    w.add("LayerNormalization", ins + [w.init(n, "gamma", per_value[0]), w.init(n, "beta", per_value[1])], out,
          n.name, axis=1, epsilon=n.layer.eps)

