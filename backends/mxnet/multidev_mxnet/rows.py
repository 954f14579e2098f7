"""A network compiled for a fixed number of rows: its attention products as grouped convolutions.

MXNet 1.9.1's batched matrix product (``batch_dot``) is a loop of OpenBLAS
calls on one thread: in the zoo's ViT (batch 32, 32x32) attention's products
took 13 ms of a 43 ms step. A grouped 1x1 convolution with one group per
sample and head (:class:`.tokens.MultiHeadAttention`) computes them on
oneDNN, within float32's rounding, but its group count is an attribute of the
compiled graph: the network is built for a full shard's rows (``Setup.rows``
over the job's devices) and every shard is brought to that length. A shorter
one (an epoch's last, evaluation's) is padded with copies of its last row
(real values: a zero row could divide by zero) and its logits cut back; a
longer one runs in pieces. That holds where rows never mix: float32 networks
without BatchNorm, whose batch statistics the padding would change, on CPUs
(a GPU's batched products are its own). Uneven shards (device weights) cost
padding on the light devices and pieces on the heavy ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from multidev import nn as mnn
from multidev.engine import ModelSpec, Setup

from .runtime import mxnet

mx = mxnet()

nd = mx.nd


def shard_rows(setup: Setup) -> Optional[int]:
    """A full shard's rows: the first devices' share of a full micro-batch (None where batches have any size, or
    on GPUs)."""
    return None if any(d.kind != "cpu" for d in setup.devices) else setup.full_shard()


#: the fewest tokens for the grouped convolutions (one block forward and backward, 64 wide, 4 heads, Zen 4,
#: their time over ``batch_dot``'s): 5 tokens 1.16, 17 0.99, 26 0.84, 65 0.67
GROUPED_TOKENS = 21


def grouped(shape: tuple[int, ...]) -> bool:
    """Whether self-attention on (L, D) tokens gains from the grouped convolutions: enough tokens, and a count
    oneDNN does not compute in its blocked layouts. With a multiple of 4 tokens it does, and the products took
    1.07 to 3.8 times ``batch_dot``'s time (16, 64, 68 and 196 tokens; 26, 50, 65 and 197: 0.67 to 0.89)."""
    return shape[0] >= GROUPED_TOKENS and shape[0] % 4 != 0


def fixed_rows(spec: ModelSpec, shapes: dict[str, tuple[int, ...]], exact: bool, rows: Optional[int]) -> Optional[int]:
    """The rows to compile ``spec``'s network for (``shapes``: each node's output per sample), or None: its
    attention (if any) as ``batch_dot``, any rows.

    Only float32 takes the grouped convolutions (float64, the truth, keeps
    ``batch_dot``: MXNet's own kernels); only a network with self-attention
    over enough tokens gains, and one with BatchNorm would see the padding in
    its statistics.
    """
    layers = [(node.layer, shapes[node.inputs[0]]) for node in spec.graph.nodes]
    attends = any(type(layer) is mnn.MultiHeadAttention and grouped(shape) for layer, shape in layers)
    if exact or rows is None or not attends or any(isinstance(layer, mnn.BatchNorm) for layer, _ in layers):
        return None
    return rows


def _filled(a: nd.NDArray, rows: int) -> nd.NDArray:
    """``a`` with copies of its last row up to ``rows`` rows."""
    last = nd.slice_axis(a, axis=0, begin=a.shape[0] - 1, end=a.shape[0])
    return nd.concat(a, nd.repeat(last, repeats=rows - a.shape[0], axis=0), dim=0)


def logits(compute: Callable, rows: Optional[int], x: nd.NDArray, masks: Sequence[nd.NDArray]) -> nd.NDArray:
    """``compute(x, *masks)`` on a network compiled for ``rows`` rows (None: any), for a shard of any length;
    under ``autograd.record`` the padding and the pieces are differentiated as well."""
    n = x.shape[0]
    if rows is None or n == rows:
        return compute(x, *masks)
    if n < rows:
        out = compute(_filled(x, rows), *(_filled(m, rows) for m in masks))
        return nd.slice_axis(out, axis=0, begin=0, end=n)
    pieces = [logits(compute, rows, nd.slice_axis(x, axis=0, begin=a, end=min(a + rows, n)),
                     [nd.slice_axis(m, axis=0, begin=a, end=min(a + rows, n)) for m in masks])
              for a in range(0, n, rows)]
    return nd.concat(*pieces, dim=0)


__all__ = ["GROUPED_TOKENS", "fixed_rows", "grouped", "logits", "shard_rows"]
