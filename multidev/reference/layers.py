"""One device's arithmetic: forward and backward of each layer, in NumPy, in the inputs' dtype.

Every forward returns its output and what its backward needs; every backward
takes the gradient of the loss with respect to the output and returns the
gradient with respect to the input (and the layer's parameters). Nothing here
knows about devices: ``network.py`` runs these functions on every shard.

Arrays are NCHW and convolution weights OIHW, the core's canonical layout, so
a checkpoint needs no transposes. Arithmetic stays in the dtype it is given:
float32 in the NumPy example engine, float64 where the conformance kit wants
the truth that float32 results are judged against.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


# Convolution ------------------------------------------------------------------
Padding = Union[int, Sequence[int]]  # every side, or (top, bottom, left, right) as ``multidev.nn``'s ``sides()``


def _sides(padding: Padding) -> tuple[int, int, int, int]:
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * 4
    top, bottom, left, right = padding
    return top, bottom, left, right


def _pad(x: np.ndarray, padding: Padding, extra: tuple[int, int] = (0, 0), value: float = 0.0) -> np.ndarray:
    """x with ``padding`` around its H and W, and ``extra`` more rows and columns after them (ceil_mode's)."""
    top, bottom, left, right = _sides(padding)
    return np.pad(x, ((0, 0), (0, 0), (top, bottom + extra[0]), (left, right + extra[1])), constant_values=value)


def _windows(x: np.ndarray, kh: int, kw: int, stride: int, dilation: int = 1) -> np.ndarray:
    """(n, c, oh, ow, kh, kw): every window of an NCHW array, a view; oh = (h - span) // stride + 1 (floor).

    A dilated window spans dilation * (k - 1) + 1 pixels and takes every ``dilation``-th of them.
    """
    spans = (dilation * (kh - 1) + 1, dilation * (kw - 1) + 1)
    return sliding_window_view(x, spans, axis=(2, 3))[:, :, ::stride, ::stride, ::dilation, ::dilation]


def _col2im(dcols: np.ndarray, x_shape, stride: int, padding: Padding, dtype, dilation: int = 1,
            extra: tuple[int, int] = (0, 0)) -> np.ndarray:
    """The gradient of an input from its windows' gradients (n, c, oh, ow, kh, kw): :func:`_windows` reversed.

    Each window position sent its pixels to every output it overlaps: add the
    gradient back to the same pixels (col2im), accumulating where windows
    overlap. kh * kw slices, not a per-pixel loop; pixels no window covers get
    0, and so does the padding, which is cut off at the end.
    """
    oh, ow, kh, kw = dcols.shape[2:]
    n, c, h, wd = x_shape
    top, bottom, left, right = _sides(padding)
    dxp = np.zeros((n, c, top + h + bottom + extra[0], left + wd + right + extra[1]), dtype)
    for i in range(kh):
        for j in range(kw):
            r, q = i * dilation, j * dilation
            dxp[:, :, r:r + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride] += dcols[..., i, j]
    return dxp[:, :, top:top + h, left:left + wd]


def _groups(a: np.ndarray, groups: int, axis: int) -> list[np.ndarray]:
    """Views of ``a``'s equal parts along ``axis``, one per group."""
    size = a.shape[axis] // groups
    return [a[(slice(None),) * axis + (slice(g * size, (g + 1) * size),)] for g in range(groups)]


def _join(parts: list[np.ndarray], axis: int) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, padding: Padding = 0,
           groups: int = 1, dilation: int = 1):
    """Cross-correlation (as every framework's "convolution"), im2col by a strided view.

    Any kernel (kh, kw) from the weight's OIHW shape (O, C / groups, kh, kw),
    one stride and one dilation for both axes, zero ``padding`` (one number or
    four sides); output (h + top + bottom - span) // stride + 1 rows (floor, as
    torch, ONNX and Keras "valid" on the padded input). Group g's filters see
    only group g's channels, and its outputs come g-th (torch's order).
    """
    kh, kw = w.shape[2:]
    # (n, c, oh, ow, kh, kw): a view, no copy; tensordot makes the one im2col copy.
    windows = _windows(_pad(x, padding), kh, kw, stride, dilation)
    parts = [np.tensordot(win, wg, axes=([1, 4, 5], [1, 2, 3]))  # (n, oh, ow, o / groups): one matrix product
             for win, wg in zip(_groups(windows, groups, 1), _groups(w, groups, 0))]
    y = _join(parts, 3)
    if b is not None:
        y += b
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)), (x.shape, windows, w, stride, padding, groups, dilation)


def conv2d_backward(dy: np.ndarray, cache):
    """Gradients of the input, the weight and the bias; each group's from its own channels and filters."""
    x_shape, windows, w, stride, padding, groups, dilation = cache
    dys, ws = _groups(dy, groups, 1), _groups(w, groups, 0)
    dw = _join([np.tensordot(d, win, axes=([0, 2, 3], [0, 2, 3]))  # (o / groups, c / groups, kh, kw)
                for d, win in zip(dys, _groups(windows, groups, 1))], 0)
    db = dy.sum(axis=(0, 2, 3))
    dcols = _join([np.tensordot(d, wg, axes=([1], [0])) for d, wg in zip(dys, ws)], 3)  # (n, oh, ow, c, kh, kw)
    dx = _col2im(dcols.transpose(0, 3, 1, 2, 4, 5), x_shape, stride, padding, dy.dtype, dilation)
    return dx, dw, db


# Pooling ----------------------------------------------------------------------
def avg_pool2(x: np.ndarray):
    """2x2 average pooling with stride 2; an odd last row or column is dropped, as in every framework."""
    n, c, h, w = x.shape
    even = x[:, :, :h // 2 * 2, :w // 2 * 2]
    return even.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5)), x.shape


def avg_pool2_backward(dy: np.ndarray, x_shape) -> np.ndarray:
    dx = np.zeros(x_shape, dy.dtype)
    # Each input pixel got a quarter of the vote; dropped pixels get no gradient.
    share = np.repeat(np.repeat(dy * 0.25, 2, axis=2), 2, axis=3)
    dx[:, :, :share.shape[2], :share.shape[3]] = share
    return dx


def _pool_windows(x: np.ndarray, k: int, stride: int | None, padding: Padding = 0,
                  extra: tuple[int, int] = (0, 0), value: float = 0.0):
    stride = k if stride is None else stride
    xp = _pad(x, padding, extra, value)
    if k < 1 or stride < 1 or k > min(xp.shape[2:]):
        raise ValueError(f"pooling window {k} (stride {stride}) does not fit an input of {x.shape[2]}x{x.shape[3]}"
                         f" padded by {padding}")
    return _windows(xp, k, k, stride), stride


def max_pool2d(x: np.ndarray, k: int, stride: int | None = None, padding: Padding = 0,
               extra: tuple[int, int] = (0, 0)):
    """k x k max pooling of NCHW, stride ``stride`` (k when None), floor output size of the padded input.

    The padding and ``extra`` (ceil_mode's positions past the padding, bottom
    and right) hold -inf, so no window takes them: torch's rule. Ties: the
    window's *first* maximum in row-major order (lowest row, then lowest
    column) is the one that took the output and gets the gradient, as in
    torch's max_pool2d (its argmax indices) and ONNX MaxPool's Indices; where
    windows overlap (stride < k) a pixel gets the sum from every window it won.
    """
    windows, stride = _pool_windows(x, k, stride, padding, extra, -np.inf)
    flat = windows.reshape(windows.shape[:4] + (k * k,))
    first = flat.argmax(axis=-1)  # argmax returns the first maximum
    y = np.take_along_axis(flat, first[..., None], axis=-1)[..., 0]
    return y, ((x.shape, padding, extra), first, k, stride)


def max_pool2d_backward(dy: np.ndarray, cache) -> np.ndarray:
    (x_shape, padding, extra), first, k, stride = cache
    winner = first[..., None] == np.arange(k * k)  # (n, c, oh, ow, k * k): one True per window
    dcols = np.where(winner, dy[..., None], dy.dtype.type(0)).reshape(dy.shape + (k, k))
    return _col2im(dcols, x_shape, stride, padding, dy.dtype, 1, extra)


def _counts(n: int, k: int, stride: int, before: int, after: int, outs: int, include_pad: bool) -> np.ndarray:
    """How many positions of each window along one axis the mean divides by (torch's avg_pool2d divisor).

    With the padding: the window clipped to the padded extent, so never
    ceil_mode's positions past it; without: the input's pixels only.
    """
    starts = np.arange(outs) * stride - before
    if include_pad:
        return np.minimum(starts + k, n + after) - starts
    return np.minimum(starts + k, n) - np.maximum(starts, 0)


def avg_pool2d(x: np.ndarray, k: int, stride: int | None = None, padding: Padding = 0,
               extra: tuple[int, int] = (0, 0), count_include_pad: bool = True):
    """k x k average pooling of NCHW, stride ``stride`` (k when None), floor output size of the padded input.

    Padding and ``extra`` (ceil_mode's positions past the padding) add zeros
    to the sums; the divisor is :func:`_counts`'. Leftover rows and columns
    that no window reaches are dropped and get no gradient (:func:`avg_pool2`
    is the case k = stride = 2).
    """
    windows, stride = _pool_windows(x, k, stride, padding, extra)
    top, bottom, left, right = _sides(padding)
    oh, ow = windows.shape[2:4]
    rows = _counts(x.shape[2], k, stride, top, bottom, oh, count_include_pad)
    cols = _counts(x.shape[3], k, stride, left, right, ow, count_include_pad)
    divisor = (rows[:, None] * cols[None, :]).astype(x.dtype)
    return windows.sum(axis=(4, 5)) / divisor, ((x.shape, padding, extra), divisor, k, stride)


def avg_pool2d_backward(dy: np.ndarray, cache) -> np.ndarray:
    (x_shape, padding, extra), divisor, k, stride = cache
    share = dy / divisor  # each position of a window had an equal share of its mean
    dcols = np.broadcast_to(share[..., None, None], dy.shape + (k, k))
    return _col2im(dcols, x_shape, stride, padding, dy.dtype, 1, extra)


def global_avg_pool(x: np.ndarray, keepdims: bool = False):
    """Each channel's mean: (n, c), or (n, c, 1, 1) with ``keepdims``."""
    return x.mean(axis=(2, 3), keepdims=keepdims), x.shape


def global_avg_pool_backward(dy: np.ndarray, x_shape) -> np.ndarray:
    h, w = x_shape[2:]
    share = dy.reshape(tuple(x_shape[:2]) + (1, 1)) / (h * w)  # every pixel had an equal share
    return np.broadcast_to(share, x_shape).copy()


# Activations ------------------------------------------------------------------
def relu(x: np.ndarray):
    y = np.maximum(x, 0)
    return y, y > 0


def relu_backward(dy: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return dy * mask


def relu6(x: np.ndarray):
    """min(max(x, 0), 6); the gradient flows only strictly inside (0, 6), as torch's hardtanh."""
    return np.minimum(np.maximum(x, 0), 6), (x > 0) & (x < 6)


def relu6_backward(dy: np.ndarray, inside: np.ndarray) -> np.ndarray:
    return dy * inside


def leaky_relu(x: np.ndarray, negative_slope: float = 0.01):
    slope = x.dtype.type(negative_slope)
    positive = x > 0
    return np.where(positive, x, x * slope), (positive, slope)


def leaky_relu_backward(dy: np.ndarray, cache) -> np.ndarray:
    positive, slope = cache
    return np.where(positive, dy, dy * slope)


def gelu(x: np.ndarray, approximate: str = "none"):
    """GELU: the exact form x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2))), or ``approximate="tanh"``'s.

    The exact form is the default of torch.nn.GELU() and of ONNX Gelu (Keras'
    and JAX's default is approximate=True, so an engine on those must ask for
    the exact form). erf is scipy's (installed with scikit-learn), which keeps
    float32 as float32.
    """
    if approximate == "tanh":
        return _gelu_tanh(x)
    from scipy.special import erf  # imported here: only models with GELU need scipy

    t = x.dtype.type
    cdf = t(0.5) * (t(1) + erf(x * t(1 / np.sqrt(2))))
    return x * cdf, (x, cdf, None)


def _gelu_tanh(x: np.ndarray):
    """x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), in torch's order of operations."""
    t = x.dtype.type
    th = np.tanh(t(np.sqrt(2 / np.pi)) * (x + t(0.044715) * (x * x * x)))
    return t(0.5) * x * (t(1) + th), (x, None, th)


def gelu_backward(dy: np.ndarray, cache) -> np.ndarray:
    """d/dx x Phi(x) = Phi(x) + x phi(x), phi the standard normal density; the tanh form's derivative by hand."""
    x, cdf, th = cache
    t = x.dtype.type
    if th is not None:
        inner = t(np.sqrt(2 / np.pi)) * (t(1) + t(3 * 0.044715) * (x * x))
        return dy * (t(0.5) * (t(1) + th) + t(0.5) * x * (t(1) - th * th) * inner)
    pdf = np.exp(t(-0.5) * x * x) * t(1 / np.sqrt(2 * np.pi))
    return dy * (cdf + x * pdf)


def tanh(x: np.ndarray):
    y = np.tanh(x)
    return y, y


def tanh_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    return dy * (y.dtype.type(1) - y * y)


def sigmoid(x: np.ndarray):
    """1 / (1 + exp(-x)), from e = exp(-|x|) <= 1 so that no exponential overflows for large |x|."""
    one = x.dtype.type(1)
    e = np.exp(-np.abs(x))
    y = np.where(x >= 0, one / (one + e), e / (one + e))
    return y, e


def sigmoid_backward(dy: np.ndarray, e: np.ndarray) -> np.ndarray:
    """sigmoid' = y (1 - y) = e / (1 + e)^2 with e = exp(-|x|): even in x, and exact where y rounds to 1."""
    one = e.dtype.type(1)
    return dy * (e / ((one + e) * (one + e)))


def silu(x: np.ndarray):
    """x * sigmoid(x), the sigmoid as :func:`sigmoid` computes it (no overflow)."""
    y, _ = sigmoid(x)
    return x * y, (x, y)


def silu_backward(dy: np.ndarray, cache) -> np.ndarray:
    """sigmoid(x) (1 + x (1 - sigmoid(x))), torch's form."""
    x, y = cache
    one = x.dtype.type(1)
    return dy * (y * (one + x * (one - y)))


def hard_sigmoid(x: np.ndarray):
    """min(max(x + 3, 0), 6) / 6, torch's order; the gradient 1/6 strictly inside (-3, 3), else 0.

    torch's backward multiplies by 1/6 rounded to float32 (3e-8 off); this is the exact 1/6.
    """
    t = x.dtype.type
    return np.minimum(np.maximum(x + t(3), t(0)), t(6)) / t(6), (x > -3) & (x < 3)


def hard_sigmoid_backward(dy: np.ndarray, inside: np.ndarray) -> np.ndarray:
    return np.where(inside, dy / dy.dtype.type(6), dy.dtype.type(0))


def hard_swish(x: np.ndarray):
    """x * min(max(x + 3, 0), 6) / 6, torch's order."""
    t = x.dtype.type
    return x * np.minimum(np.maximum(x + t(3), t(0)), t(6)) / t(6), x


def hard_swish_backward(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """torch's: 0 up to -3, x / 3 + 1/2 strictly inside (-3, 3), 1 from 3 on (one-sided at the kinks)."""
    t = x.dtype.type
    slope = np.where(x <= -3, t(0), np.where(x < 3, x / t(3) + t(0.5), t(1)))
    return dy * slope


def softmax(x: np.ndarray, axis: int = -1):
    """exp(x) / sum(exp(x)) along ``axis`` (of the whole array), the maximum subtracted first: nothing overflows."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    y = e / e.sum(axis=axis, keepdims=True)
    return y, (y, axis)


def softmax_backward(dy: np.ndarray, cache) -> np.ndarray:
    """y (dy - sum(dy y)) along the axis: the Jacobian diag(y) - y y^T applied without forming it."""
    y, axis = cache
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def scale(x: np.ndarray, factor: float):
    """x times a constant, the constant rounded to x's dtype."""
    f = x.dtype.type(factor)
    return x * f, f


def scale_backward(dy: np.ndarray, f) -> np.ndarray:
    return dy * f


# Normalisation, dropout -------------------------------------------------------
def _per_feature(v: np.ndarray, ndim: int) -> np.ndarray:
    """A (C,) parameter broadcast over the axes after the feature axis 1: (1, C, 1, 1) for NCHW."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def layer_norm(x: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None, eps: float = 1e-5,
               last: int | None = None):
    """LayerNorm over each whole sample with one gamma and beta per channel, or over its ``last`` axes.

    Decision (issue 22): with ``last`` None the statistics of sample i run over
    *every axis but the batch axis* (C, H and W together for NCHW images; F for
    (N, F) features), biased variance; gamma and beta have shape (C,) (or (F,))
    and are broadcast over H and W, so the parameter count does not depend on
    the image size. For (N, F) this is torch's LayerNorm(F) and Keras'
    LayerNormalization(); for images it is torch's F.layer_norm over (C, H, W)
    with its elementwise weight set to gamma repeated over H and W (GroupNorm
    with one group computes the same), not Keras' default (the last axis only).
    With ``last`` k the statistics run over the last k axes and gamma and beta
    have their shape: torch's F.layer_norm(x, x.shape[-k:]), a transformer's
    k = 1. gamma and beta None: no scale and shift (``affine=False``).
    """
    axes = tuple(range(1 if last is None else x.ndim - last, x.ndim))
    t = x.dtype.type
    centred = x - x.mean(axis=axes, keepdims=True)
    inv_std = t(1) / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + t(eps))
    xhat = centred * inv_std
    if gamma is None:
        return xhat, (xhat, inv_std, None, axes, ())
    # the axes a parameter is broadcast along, which its gradient sums over
    if last is None:
        g, b, others = _per_feature(gamma, x.ndim), _per_feature(beta, x.ndim), (0,) + tuple(range(2, x.ndim))
    else:
        g, b, others = gamma, beta, tuple(range(x.ndim - last))
    return xhat * g + b, (xhat, inv_std, g, axes, others)


def layer_norm_backward(dy: np.ndarray, cache):
    """(dx, dgamma, dbeta); dx = inv_std * (d - mean(d) - x^ mean(d x^)) with d = dy * gamma, means per sample.

    dgamma and dbeta are None without an affine transform.
    """
    xhat, inv_std, g, axes, others = cache
    d = dy if g is None else dy * g
    dx = inv_std * (d - d.mean(axis=axes, keepdims=True) - xhat * (d * xhat).mean(axis=axes, keepdims=True))
    if g is None:
        return dx, None, None
    return dx, (dy * xhat).sum(axis=others), dy.sum(axis=others)


def dropout(x: np.ndarray, mask: np.ndarray, p: float):
    """Inverted dropout, as torch and Keras: y = x * mask / (1 - p), the identity at inference.

    ``mask`` (1 keeps, 0 drops; x's shape) comes from the caller, which draws
    it; torch's order of operations: x * (mask / (1 - p)), 1 - p rounded to
    x's dtype. p = 1 drops everything (y = 0, as torch).
    """
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability {p} is not in [0, 1]")
    keep = x.dtype.type(1 - p)
    scaled = np.zeros_like(x) if p == 1 else mask.astype(x.dtype) / keep
    return x * scaled, scaled


def dropout_backward(dy: np.ndarray, scaled: np.ndarray) -> np.ndarray:
    return dy * scaled


# Shapes and joins -------------------------------------------------------------
def flatten(x: np.ndarray):
    """Any (n, ...) to (n, values) in C order: NCHW rows reshaped as they lie."""
    return x.reshape(len(x), -1), x.shape


def flatten_backward(dy: np.ndarray, x_shape) -> np.ndarray:
    return dy.reshape(x_shape)


def reshape(x: np.ndarray, shape: Sequence[int]):
    """Each sample's values in C order given ``shape`` (the batch left out; one -1 takes what is left)."""
    return x.reshape((len(x),) + tuple(shape)), x.shape


def reshape_backward(dy: np.ndarray, x_shape) -> np.ndarray:
    return dy.reshape(x_shape)


def transpose(x: np.ndarray, perm: Sequence[int]):
    """Each sample's axes in the order ``perm`` (sample axes: 0 is the first after the batch)."""
    axes = (0,) + tuple(p + 1 for p in perm)
    return np.ascontiguousarray(x.transpose(axes)), axes


def transpose_backward(dy: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The inverse permutation puts every gradient back where its value came from."""
    return np.ascontiguousarray(dy.transpose(np.argsort(axes)))


def slice_axis(x: np.ndarray, axis: int, start: int, stop: int, step: int):
    """``x[start:stop:step]`` along sample axis ``axis`` (bounds already resolved, as ``Slice.bounds`` does)."""
    index = (slice(None),) * (axis + 1) + (slice(start, stop, step),)
    return x[index].copy(), (x.shape, index)


def slice_axis_backward(dy: np.ndarray, cache) -> np.ndarray:
    """The values the slice left out had no effect on the loss: their gradient is 0."""
    x_shape, index = cache
    dx = np.zeros(x_shape, dy.dtype)
    dx[index] = dy
    return dx


def pad_axis(x: np.ndarray, axis: int, before: int, after: int, value: float):
    """``before`` and ``after`` values of ``value`` along sample axis ``axis``."""
    widths = [(0, 0)] * x.ndim
    widths[axis + 1] = (before, after)
    return np.pad(x, widths, constant_values=value), (axis, before, x.shape[axis + 1])


def pad_axis_backward(dy: np.ndarray, cache) -> np.ndarray:
    """The added values are constants: the input's gradient is dy's slice over the input."""
    axis, before, size = cache
    return dy[(slice(None),) * (axis + 1) + (slice(before, before + size),)].copy()


def mean_axes(x: np.ndarray, over: tuple[int, ...], keepdims: bool):
    """The mean over axes ``over`` of the batched array (the batch first)."""
    return x.mean(axis=over, keepdims=keepdims), (x.shape, over)


def mean_axes_backward(dy: np.ndarray, cache) -> np.ndarray:
    """Each averaged value gets dy over the count it was averaged with."""
    x_shape, over = cache
    count = int(np.prod([x_shape[a] for a in over]))
    kept = dy.reshape([1 if k in over else n for k, n in enumerate(x_shape)])
    return np.broadcast_to(kept / count, x_shape).copy()


def concat(xs, axis: int = 1):
    """The inputs joined along ``axis`` (channels for NCHW), in the order given."""
    return np.concatenate(xs, axis=axis), ([x.shape[axis] for x in xs], axis)


def concat_backward(dy: np.ndarray, cache) -> list:
    """Each input's slice of the gradient."""
    sizes, axis = cache
    return np.split(dy, np.cumsum(sizes)[:-1], axis=axis)


def add(xs):
    """The inputs' elementwise sum, added left to right (same shapes)."""
    y = xs[0].copy()
    for x in xs[1:]:
        y += x
    return y, len(xs)


def add_backward(dy: np.ndarray, count: int) -> list:
    """Every input gets the whole gradient (one copy each)."""
    return [dy.copy() for _ in range(count)]


def _expand(x: np.ndarray, rank: int) -> np.ndarray:
    """x with 1s after the batch axis up to ``rank`` axes, so that NumPy broadcasts the samples' shapes."""
    return x.reshape((len(x),) + (1,) * (rank - x.ndim) + x.shape[1:])


def mul(xs):
    """The inputs' elementwise product, left to right, the samples' shapes broadcast as NumPy does."""
    rank = max(x.ndim for x in xs)
    parts = [_expand(x, rank) for x in xs]
    y = parts[0]
    for x in parts[1:]:
        y = y * x
    return y, (parts, [x.shape for x in xs])


def _unbroadcast(g: np.ndarray, expanded: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """``g`` summed over the axes an input of ``shape`` (``expanded`` to g's rank) was broadcast along."""
    axes = tuple(a for a in range(g.ndim) if expanded[a] == 1 and g.shape[a] != 1)
    return (g.sum(axis=axes, keepdims=True) if axes else g).reshape(shape)


def sub(xs):
    """The first input minus the second, the samples' shapes broadcast as NumPy does."""
    rank = max(x.ndim for x in xs)
    a, b = (_expand(x, rank) for x in xs)
    return a - b, ((a.shape, b.shape), [x.shape for x in xs])


def sub_backward(dy: np.ndarray, cache) -> list:
    (a, b), (sa, sb) = cache
    return [_unbroadcast(dy, a, sa), _unbroadcast(-dy, b, sb)]


def div(xs):
    """The first input divided by the second, the samples' shapes broadcast as NumPy does."""
    rank = max(x.ndim for x in xs)
    a, b = (_expand(x, rank) for x in xs)
    y = a / b
    return y, (y, b, a.shape, [x.shape for x in xs])


def div_backward(dy: np.ndarray, cache) -> list:
    """d(a / b) = da / b - a db / b^2 = (da - y db) / b."""
    y, b, a_shape, (sa, sb) = cache
    g = dy / b
    return [_unbroadcast(g, a_shape, sa), _unbroadcast(-g * y, b.shape, sb)]


def mul_backward(dy: np.ndarray, cache) -> list:
    """Each input gets dy times the other inputs, summed over the axes it was broadcast along."""
    parts, shapes = cache
    out = []
    for i, (x, shape) in enumerate(zip(parts, shapes)):
        g = dy
        for j, other in enumerate(parts):
            if j != i:
                g = g * other
        out.append(_unbroadcast(g, x.shape, shape))
    return out


def matmul(xs):
    """Each sample's (..., M, K) @ (..., K, N), the leading sample axes broadcast as NumPy does.

    The samples are expanded to one rank first, so that a sample's leading
    axes never meet the batch axis.
    """
    a, b = xs
    rank = max(a.ndim, b.ndim)
    ea, eb = _expand(a, rank), _expand(b, rank)
    return ea @ eb, (ea, eb, a.shape, b.shape)


def matmul_backward(dy: np.ndarray, cache) -> list:
    """dA = dY B^T, dB = A^T dY, each summed over the leading axes its input was broadcast along."""
    ea, eb, a_shape, b_shape = cache
    da = dy @ np.swapaxes(eb, -1, -2)
    db = np.swapaxes(ea, -1, -2) @ dy
    return [_unbroadcast(da, ea.shape, a_shape), _unbroadcast(db, eb.shape, b_shape)]


# Dense ------------------------------------------------------------------------
def dense(x: np.ndarray, w: np.ndarray, b: np.ndarray):
    """Weights (out, in), the canonical layout: y = x W^T + b on the last axis of any rank."""
    return x @ w.T + b, (x, w)


def dense_backward(dy: np.ndarray, cache):
    """Every row of every sample (tokens too) adds its outer product to the weight's gradient."""
    x, w = cache
    rows = dy.reshape(-1, dy.shape[-1])
    return dy @ w, rows.T @ x.reshape(-1, x.shape[-1]), rows.sum(axis=0)


# Loss -------------------------------------------------------------------------
def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray, batch_size: int):
    """Sum of the shard's losses, its correct count, and the gradient of (shard loss sum) / B.

    Dividing by the whole minibatch's B, not the shard's size, is what makes the
    devices' gradients add up to the one-device gradient for any shard sizes.
    """
    rows = np.arange(len(labels))
    shifted = logits - logits.max(axis=1, keepdims=True)  # exp cannot overflow
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss_sum = float(-log_probs[rows, labels].sum())
    correct = int((logits.argmax(axis=1) == labels).sum())
    grad = np.exp(log_probs)
    grad[rows, labels] -= 1.0
    return loss_sum, correct, grad / logits.dtype.type(batch_size)
