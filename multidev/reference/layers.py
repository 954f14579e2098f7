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
def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, padding: int):
    """Cross-correlation (as every framework's "convolution"), im2col by a strided view."""
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    # (n, c, oh, ow, kh, kw): a view, no copy; tensordot makes the one im2col copy.
    windows = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    y = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # (n, oh, ow, o): one matrix product
    if b is not None:
        y += b
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)), (x.shape, windows, w, stride, padding)


def conv2d_backward(dy: np.ndarray, cache):
    """Gradients of the input, the weight and the bias."""
    x_shape, windows, w, stride, padding = cache
    kh, kw = w.shape[2:]
    oh, ow = dy.shape[2:]
    dw = np.tensordot(dy, windows, axes=([0, 2, 3], [0, 2, 3]))  # (o, c, kh, kw)
    db = dy.sum(axis=(0, 2, 3))
    # Each window position sent its pixels to every output it overlaps: add the
    # gradient back to the same pixels (col2im). kh * kw slices, not a per-pixel loop.
    dcols = np.tensordot(dy, w, axes=([1], [0])).transpose(0, 3, 1, 2, 4, 5)  # (n, c, oh, ow, kh, kw)
    n, c, h, wd = x_shape
    dxp = np.zeros((n, c, h + 2 * padding, wd + 2 * padding), dy.dtype)
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride] += dcols[..., i, j]
    return dxp[:, :, padding:padding + h, padding:padding + wd], dw, db


# Pooling, activation, dense ---------------------------------------------------
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


def global_avg_pool(x: np.ndarray):
    return x.mean(axis=(2, 3)), x.shape


def global_avg_pool_backward(dy: np.ndarray, x_shape) -> np.ndarray:
    n, c, h, w = x_shape
    return np.broadcast_to((dy / (h * w))[:, :, None, None], x_shape).copy()  # every pixel had an equal share


def relu(x: np.ndarray):
    y = np.maximum(x, 0)
    return y, y > 0


def relu_backward(dy: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return dy * mask


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
