"""Normalisation: BatchNormalization (its epsilon and momentum; a training-mode export read as what it is) and
LayerNormalization over the last axes (a transformer's, ConvNeXt's after its permute) or each whole sample."""

from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn.graph import NodeSpec
from multidev.nn.layers import BatchNorm, LayerNorm
from multidev.nn.onnx.base import bad, complement, decimal, rank, reads, where, writes
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


def _per_channel(array: np.ndarray, rank_: int) -> Optional[np.ndarray]:
    """A LayerNorm scale as one value per channel (ONNX's is per value of the sample), or None where it varies
    within a channel."""
    if array.ndim == rank_ - 1 and rank_ > 2:
        flat = array.reshape(array.shape[0], -1)
        return flat[:, 0].copy() if np.all(flat == flat[:, :1]) else None
    return array if array.ndim == 1 and rank_ == 2 else None


def _affine(r: Reader, node) -> tuple[np.ndarray, Optional[np.ndarray], bool]:
    """(scale, bias, affine): no bias and a scale of ones that is no initializer (a Constant) is affine=False."""
    scale, bias = r.const(node, 1, "scale"), r.optional(node, 2)
    if len(node.input) > 2 and node.input[2] and bias is None:
        r.const(node, 2, "bias")  # one line: the bias comes from a computed value
    learned = node.input[1] in r.inits or not np.all(scale == 1) or bias is not None
    return scale, bias, learned


def _fit(node, array: np.ndarray, normalized: Optional[tuple[int, ...]], k: int, what: str) -> np.ndarray:
    """ONNX's scale (or bias), broadcast over the normalised axes, as multidev's gamma (or beta) of their shape."""
    if normalized is None and array.ndim == k:
        return array
    try:
        return np.broadcast_to(array, normalized).copy()  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise bad(node, f"has a {what} of shape {array.shape} for the last {k} axes of values whose size "
                        f"multidev.nn does not know: export with a fixed input size") from None


@reads("LayerNormalization", note="over the last axes, or over each whole sample")
def _layernorm(r: Reader, node, attrs: dict) -> None:
    """axis -k: the last k axes (torch's LayerNorm(shape[-k:]), a transformer's -1); axis 1 (or any axis of
    features), each whole sample, one scale per channel where it is so (multidev's LayerNorm()), else per value."""
    x = r.value(node)
    n, axis = rank(x[1]), int(attrs.get("axis", -1))
    if not -n <= axis < n or axis % n == 0:
        raise bad(node, f"normalises from axis {axis} of values of rank {n}: multidev.nn's LayerNorm normalises "
                        f"the last axes of each sample, never the batch")
    k, eps = n - axis % n, decimal(attrs.get("epsilon", 1e-5))
    scale, bias, learned = _affine(r, node)
    whole = k == n - 1 and (n == 2 or axis > 0)  # axis -k: the last axes, as torch and to_onnx write them
    gamma = _per_channel(scale, n) if whole else None
    beta = _per_channel(bias, n) if whole and gamma is not None and bias is not None else None
    last: Optional[int] = None
    if gamma is None or bias is not None and beta is None:
        shape = r.onnx_shape(x)
        last = None if whole and not learned else k
        gamma = _fit(node, scale, shape[-k:] if shape else None, k, "scale")
        beta = None if bias is None else _fit(node, bias, shape[-k:] if shape else None, k, "bias")
    layer = r.make(node, LayerNorm, eps=eps, last=last, affine=learned)
    params = {"gamma": gamma, "beta": np.zeros_like(gamma) if beta is None else beta} if learned else {}
    r.emit(node, layer, [x], x[1], hint(node, "ln", node.input[1]), r.weights(node, params))


@writes(BatchNorm)
def _w_batchnorm(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """For inference: the running statistics (no training_mode); momentum as ONNX counts it."""
    inputs = ins + [w.init(n, p) for p in ("gamma", "beta", "running_mean", "running_var")]
    w.add("BatchNormalization", inputs, out, n.name, epsilon=n.layer.eps, momentum=1.0 - n.layer.momentum)


@writes(LayerNorm)
def _w_layernorm(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """ONNX's scale is per value of the normalised axes: multidev's per-channel gamma and beta (``last`` None)
    repeated over H and W; without affine, a Constant scale of ones and no bias."""
    if w.opset < 17:
        raise MultidevError(f"{n.layer.where(n.name)} needs ONNX opset 17 or newer (LayerNormalization): "
                            f"export with opset=17")
    L, shape = n.layer, w.shapes[n.inputs[0]]
    axis = 1 if L.last is None else -L.last
    normalized = shape if L.last is None else shape[-L.last:]
    if not L.affine:
        w.add("LayerNormalization", ins + [w.tensor(n.name + "/ones", np.ones(normalized))], out, n.name, axis=axis,
              epsilon=L.eps)
        return
    if L.last is None:
        params = [np.broadcast_to(w.state[f"{n.name}.{p}"].reshape((-1,) + (1,) * (len(shape) - 1)), shape)
                  for p in ("gamma", "beta")]
    else:
        params = [w.state[f"{n.name}.{p}"] for p in ("gamma", "beta")]
    w.add("LayerNormalization", ins + [w.init(n, "gamma", params[0]), w.init(n, "beta", params[1])], out,
          n.name, axis=axis, epsilon=L.eps)

