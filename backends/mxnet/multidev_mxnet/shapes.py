"""The model language's layers of any rank without parameters on MXNet's operators: reshapes, transposes,
slices, concatenations, batched matrix products and softmax.

The language counts a sample's axes (0: the first after the batch, negative
from the end); MXNet's operators count the batch axis too, so a sample's
axis ``a`` of ``rank`` axes is MXNet's ``a % rank + 1``. Each function takes
(F, layer, inputs, their shapes per sample), as the engine's table of
functions does.
"""

from __future__ import annotations

from multidev import nn as mnn  # the model language
from multidev.nn.layers import broadcast

Shape = tuple[int, ...]


def axis(value: int, rank: int) -> int:
    """MXNet's axis for the sample's axis ``value`` of a sample of ``rank`` axes."""
    return value % rank + 1


def reshape(F, layer: mnn.Reshape, xs: list, shapes: list[Shape]):
    """The sizes resolved once (no -1 left for MXNet to infer), the batch axis kept by MXNet's 0."""
    return F.reshape(xs[0], shape=(0, *layer.infer("", shapes)))


def transpose(F, layer: mnn.Transpose, xs: list, shapes: list[Shape]):
    return F.transpose(xs[0], axes=(0, *(p + 1 for p in layer.perm)))


def pad(F, layer: mnn.Pad, xs: list, shapes: list[Shape]):
    """Blocks of the value joined before and after along the axis (MXNet's ``pad`` takes only the last axes of
    4-D and 5-D arrays): a one-wide slice of x's shape, filled with the value, repeated."""
    x, at = xs[0], layer.axis % len(shapes[0]) + 1
    edge = F.zeros_like(F.slice_axis(x, axis=at, begin=0, end=1)) + layer.value
    before = [F.repeat(edge, repeats=layer.before, axis=at)] if layer.before else []
    after = [F.repeat(edge, repeats=layer.after, axis=at)] if layer.after else []
    parts = before + [x] + after
    return parts[0] if len(parts) == 1 else F.concat(*parts, dim=at)


def take(F, layer: mnn.Slice, xs: list, shapes: list[Shape]):
    """``slice_axis`` for a step of 1 (a view's gradient, no step arithmetic); ``slice`` with its step else."""
    at, start, stop, step = layer.bounds(shapes[0])
    if step == 1:
        return F.slice_axis(xs[0], axis=at + 1, begin=start, end=stop)
    before = (None,) * (at + 1)
    return F.slice(xs[0], begin=(*before, start), end=(*before, stop), step=(*before, step))


def concat(F, layer: mnn.Concat, xs: list, shapes: list[Shape]):
    """Inputs joined, then passed through an operator oneDNN does not run (a whole-axis slice).

    oneDNN's concat takes its gradient in the blocked layout a following
    convolution gives it (16 channels a block on AVX-512) and splits it where
    each part's channels end: a part that ends inside a block (8 + 8) divides
    by zero in libmxnet 1.9.1 (SIGFPE: the process gone without a word). An
    operator of MXNet's own hands the concat its gradient in the plain layout.
    Measured, hybridized: 8+8, 8+24 and 4+4+8 channels train, equal to
    ``MXNET_MKLDNN_ENABLED=0``; a copy, a reshape or adding zeros is itself
    run by oneDNN (or folded away) and still crashes.
    """
    dim = axis(layer.axis, len(shapes[0]))
    return F.slice_axis(F.concat(*xs, dim=dim), axis=dim, begin=0, end=None)


def softmax(F, layer: mnn.Softmax, xs: list, shapes: list[Shape]):
    return F.softmax(xs[0], axis=axis(layer.axis, len(shapes[0])))


def matmul(F, layer: mnn.MatMul, xs: list, shapes: list[Shape]):
    """(..., M, K) @ (..., K, N) as one ``batch_dot`` of 3-d stacks: the leading axes (batch included)
    broadcast to their common sizes, then merged into the stack's axis, then split again."""
    a, b = shapes
    if len(a) == len(b) == 2:
        return F.batch_dot(xs[0], xs[1])
    lead = broadcast(layer, "", [a[:-2], b[:-2]])
    stacks = [_stack(F, x, shape, lead) for x, shape in zip(xs, shapes)]
    return F.reshape(F.batch_dot(*stacks), shape=(-1, *lead, a[-2], b[-1]))


def _stack(F, x, shape: Shape, lead: Shape):
    """``x`` (N, *shape) as (N * prod(lead), *shape[-2:]): size-1 axes after the batch axis where the sample has
    fewer leading axes (NumPy's broadcasting of the samples), each broadcast to ``lead``'s size."""
    padded = (1,) * (len(lead) - len(shape) + 2) + tuple(shape[:-2])
    if len(padded) != len(shape) - 2:
        x = F.reshape(x, shape=(0, *padded, *shape[-2:]))
    if padded != lead:
        x = F.broadcast_to(x, shape=(0, *lead, 0, 0))
    return F.reshape(x, shape=(-1, *shape[-2:]))
