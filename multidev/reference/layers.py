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

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


# Convolution ------------------------------------------------------------------
def _windows(x: np.ndarray, kh: int, kw: int, stride: int) -> np.ndarray:
    """(n, c, oh, ow, kh, kw): every window of an NCHW array, a view; oh = (h - kh) // stride + 1 (floor)."""
    return sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]


def _col2im(dcols: np.ndarray, x_shape, stride: int, padding: int, dtype) -> np.ndarray:
    """The gradient of an input from its windows' gradients (n, c, oh, ow, kh, kw): :func:`_windows` reversed.

    Each window position sent its pixels to every output it overlaps: add the
    gradient back to the same pixels (col2im), accumulating where windows
    overlap. kh * kw slices, not a per-pixel loop; pixels no window covers get 0.
    """
    oh, ow, kh, kw = dcols.shape[2:]
    n, c, h, wd = x_shape
    dxp = np.zeros((n, c, h + 2 * padding, wd + 2 * padding), dtype)
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride] += dcols[..., i, j]
    return dxp[:, :, padding:padding + h, padding:padding + wd]


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, padding: int):
    """Cross-correlation (as every framework's "convolution"), im2col by a strided view.

    Any kernel (kh, kw) from the weight's OIHW shape, one stride and one zero
    padding for both axes; output (h + 2 * padding - kh) // stride + 1 rows
    (floor, as torch, ONNX and Keras "valid" on the padded input).
    """
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    # (n, c, oh, ow, kh, kw): a view, no copy; tensordot makes the one im2col copy.
    windows = _windows(xp, kh, kw, stride)
    y = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # (n, oh, ow, o): one matrix product
    if b is not None:
        y += b
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)), (x.shape, windows, w, stride, padding)


def conv2d_backward(dy: np.ndarray, cache):
    """Gradients of the input, the weight and the bias."""
    x_shape, windows, w, stride, padding = cache
    dw = np.tensordot(dy, windows, axes=([0, 2, 3], [0, 2, 3]))  # (o, c, kh, kw)
    db = dy.sum(axis=(0, 2, 3))
    dcols = np.tensordot(dy, w, axes=([1], [0])).transpose(0, 3, 1, 2, 4, 5)  # (n, c, oh, ow, kh, kw)
    return _col2im(dcols, x_shape, stride, padding, dy.dtype), dw, db


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


def _pool_windows(x: np.ndarray, k: int, stride: int | None):
    stride = k if stride is None else stride
    if k < 1 or stride < 1 or k > min(x.shape[2:]):
        raise ValueError(f"pooling window {k} (stride {stride}) does not fit an input of {x.shape[2]}x{x.shape[3]}")
    return _windows(x, k, k, stride), stride


def max_pool2d(x: np.ndarray, k: int, stride: int | None = None):
    """k x k max pooling of NCHW, stride ``stride`` (k when None), no padding, floor output size.

    Ties: the window's *first* maximum in row-major order (lowest row, then
    lowest column) is the one that took the output and gets the gradient, as in
    torch's max_pool2d (its argmax indices) and ONNX MaxPool's Indices; where
    windows overlap (stride < k) a pixel gets the sum from every window it won.
    """
    windows, stride = _pool_windows(x, k, stride)
    flat = windows.reshape(windows.shape[:4] + (k * k,))
    first = flat.argmax(axis=-1)  # argmax returns the first maximum
    y = np.take_along_axis(flat, first[..., None], axis=-1)[..., 0]
    return y, (x.shape, first, k, stride)


def max_pool2d_backward(dy: np.ndarray, cache) -> np.ndarray:
    x_shape, first, k, stride = cache
    winner = first[..., None] == np.arange(k * k)  # (n, c, oh, ow, k * k): one True per window
    dcols = np.where(winner, dy[..., None], dy.dtype.type(0)).reshape(dy.shape + (k, k))
    return _col2im(dcols, x_shape, stride, 0, dy.dtype)


def avg_pool2d(x: np.ndarray, k: int, stride: int | None = None):
    """k x k average pooling of NCHW, stride ``stride`` (k when None), no padding, floor output size.

    Leftover rows and columns that no window reaches are dropped and get no
    gradient (:func:`avg_pool2` is the case k = stride = 2).
    """
    windows, stride = _pool_windows(x, k, stride)
    return windows.mean(axis=(4, 5)), (x.shape, k, stride)


def avg_pool2d_backward(dy: np.ndarray, cache) -> np.ndarray:
    x_shape, k, stride = cache
    share = dy / dy.dtype.type(k * k)  # each pixel of a window had an equal share of its mean
    dcols = np.broadcast_to(share[..., None, None], dy.shape + (k, k))
    return _col2im(dcols, x_shape, stride, 0, dy.dtype)


def global_avg_pool(x: np.ndarray):
    return x.mean(axis=(2, 3)), x.shape


def global_avg_pool_backward(dy: np.ndarray, x_shape) -> np.ndarray:
    h, w = x_shape[2:]
    return np.broadcast_to((dy / (h * w))[:, :, None, None], x_shape).copy()  # every pixel had an equal share


# Activations ------------------------------------------------------------------
def relu(x: np.ndarray):
    y = np.maximum(x, 0)
    return y, y > 0


def relu_backward(dy: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return dy * mask


def gelu(x: np.ndarray):
    """GELU, the exact form x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2))).

    The default of torch.nn.GELU() (approximate="none") and of ONNX Gelu; not
    the tanh approximation (Keras' and JAX's default is approximate=True, so an
    engine on those must ask for the exact form). erf is scipy's (installed
    with scikit-learn), which keeps float32 as float32.
    """
    from scipy.special import erf  # imported here: only models with GELU need scipy

    t = x.dtype.type
    cdf = t(0.5) * (t(1) + erf(x * t(1 / np.sqrt(2))))
    return x * cdf, (x, cdf)


def gelu_backward(dy: np.ndarray, cache) -> np.ndarray:
    """d/dx x Phi(x) = Phi(x) + x phi(x), phi the standard normal density."""
    x, cdf = cache
    t = x.dtype.type
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


# Normalisation, dropout -------------------------------------------------------
def _per_feature(v: np.ndarray, ndim: int) -> np.ndarray:
    """A (C,) parameter broadcast over the axes after the feature axis 1: (1, C, 1, 1) for NCHW."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5):
    """LayerNorm over each whole sample, with one gamma and beta per feature (channel).

    Decision (issue 22): the statistics of sample i run over *every axis but
    the batch axis* (C, H and W together for NCHW images; F for (N, F)
    features), biased variance; gamma and beta have shape (C,) (or (F,)) and
    are broadcast over H and W, so the parameter count does not depend on the
    image size. For (N, F) this is torch's LayerNorm(F) and Keras'
    LayerNormalization(); for images it is torch's F.layer_norm over (C, H, W)
    with its elementwise weight set to gamma repeated over H and W (GroupNorm
    with one group computes the same), not Keras' default (the last axis only).
    """
    axes = tuple(range(1, x.ndim))
    t = x.dtype.type
    centred = x - x.mean(axis=axes, keepdims=True)
    inv_std = t(1) / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + t(eps))
    xhat = centred * inv_std
    g = _per_feature(gamma, x.ndim)
    return xhat * g + _per_feature(beta, x.ndim), (xhat, inv_std, g)


def layer_norm_backward(dy: np.ndarray, cache):
    """(dx, dgamma, dbeta); dx = inv_std * (d - mean(d) - x^ mean(d x^)) with d = dy * gamma, means per sample."""
    xhat, inv_std, g = cache
    axes = tuple(range(1, dy.ndim))
    d = dy * g
    dx = inv_std * (d - d.mean(axis=axes, keepdims=True) - xhat * (d * xhat).mean(axis=axes, keepdims=True))
    others = (0,) + tuple(range(2, dy.ndim))  # every axis but the feature axis
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
    """(n, c, h, w) to (n, c * h * w) in C, H, W order: NCHW rows reshaped as they lie."""
    return x.reshape(len(x), -1), x.shape


def flatten_backward(dy: np.ndarray, x_shape) -> np.ndarray:
    return dy.reshape(x_shape)


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


# Dense ------------------------------------------------------------------------
def dense(x: np.ndarray, w: np.ndarray, b: np.ndarray):
    """Weights (out, in), the canonical layout: y = x W^T + b."""
    return x @ w.T + b, (x, w)


def dense_backward(dy: np.ndarray, cache):
    x, w = cache
    return dy @ w, dy.T @ x, dy.sum(axis=0)


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
