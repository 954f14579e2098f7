"""float32 forms of layers whose MXNet 1.9.1 operators are slow on CPU, written so that oneDNN does the work.

The network takes them in float32 only (:func:`.model.build`); float64, the truth, keeps the exact forms on
MXNet's own kernels. Each agrees with the exact form within float32's rounding (ReLU6's values exactly). Figures:
forward and backward, compiled, float32, 2 threads of an AMD EPYC (Zen 4), medians of alternated runs.
"""

from __future__ import annotations

import numpy as np

#: in the name of every FullyConnected that computes statistics (LayerNorm's, the global pooling's): bfloat16 leaves
#: those in float32, as contrib.amp leaves Pooling
KEEP_FLOAT32 = "keep_float32"


def layer_norm_constants(params, units: int) -> tuple:
    """The constant weights :func:`layer_norm` takes: ``mean`` (1, units) of 1 / units, ``spread`` (units, 1)
    of ones (a graph reads arrays only from variables)."""
    return (params.get_constant("mean", np.full((1, units), 1.0 / units, np.float32)),
            params.get_constant("spread", np.ones((units, 1), np.float32)))


def _dense(F, x, weight, units: int, role: str):
    return F.FullyConnected(x, weight, num_hidden=units, no_bias=True, flatten=False, name=f"{KEEP_FLOAT32}_{role}")


def layer_norm(F, x, gamma, beta, mean, spread, eps: float, units: int):
    """LayerNorm over the last axis (``units`` values) with a scale and shift per value, every sum a
    FullyConnected.

    MXNet 1.9.1's LayerNorm backward has no oneDNN path (a generic reduction):
    2.50 ms on (32, 65, 64), this form 1.30 ms (8 x 197 x 768: 24.5 ms, 9.9 ms;
    the zoo's ViT's step, batch 32: 0.83 of the time).
    Row means are products with ``mean`` (1/units), and they spread back over
    the row through ``spread`` (ones); the scale and the shift spread from one
    column the same way, with gamma and beta as the weights, so their
    gradients, sums over rows, are oneDNN's too. Broadcast operators would
    differentiate through the same generic reduction; a diagonal weight would
    cost units^2 per row. Centred first, then squared: no cancellation.
    """
    centred = x - _dense(F, _dense(F, x, mean, 1, "mean"), spread, units, "centre")
    var = _dense(F, F.square(centred), mean, 1, "var")
    scale = _dense(F, F.rsqrt(var + eps), F.reshape(gamma, shape=(-1, 1)), units, "scale")
    return centred * scale + _dense(F, F.ones_like(var), F.reshape(beta, shape=(-1, 1)), units, "shift")


def clip(F, x, high: float):
    """``clip(x, 0, high)`` with the exact form's values (NaN passes), its gradient passed at exactly 0 and
    ``high`` too (``maximum``'s and ``minimum``'s ties; the exact form, :func:`.model._clip`, passes none there).

    MXNet's clip is a slow kernel: 31.1 ms on (32, 144, 32, 32), this form
    18.5 ms (conv, BatchNorm, this, conv: 0.70 of clip's time). The lower
    bound is an elementwise maximum against zeros, not a scalar one: the
    scalar operators' backward works in place, and a chain of them hands
    BatchNorm's backward a gradient in the blocked layout of the convolution
    after it, which with the data in the one of the convolution before it
    (aBcd8b against aBcd16b) sends oneDNN to its reference kernel (210 ms a
    call). The minimum first: it alone then reads ``x`` out of oneDNN's layout.
    Giving the bounds their ties, as the exact form does, costs here: with
    the bound first, the same reference kernel returns (MobileNetV2 at 12-14
    samples/s against 44-56); a mask, ``low * (low > 0)``, is as fast but
    turns -inf into NaN; a ``where``, or the mask after a clamp of -inf, costs
    a third. An input exactly on a bound is rarer than float32's rounding
    moving one across it (MobileNetV2's first float32 batch: once in 96
    million inputs).
    """
    low = F.minimum(x, high)
    return F.maximum(low, F.zeros_like(low))


def relu6(F, layer, xs, shapes):
    """ReLU6 as :func:`clip`: MobileNetV2's step (batch 32, 32x32) takes 0.80 to 0.85 of the time with MXNet's."""
    return clip(F, xs[0], 6.0)


def global_avg_pool(F, layer, xs, shapes):
    """Each channel's mean, its sum a FullyConnected against ones: 0.73 ms on (32, 1280, 4, 4), ``mean`` 2.45 ms.

    oneDNN's global pooling is as fast, but with channels in blocks of 8 (24
    of them, AVX-512) its backward picks a layout that only its reference
    kernels take, BatchNorm's backward after it too; the reshape to rows
    hands the FullyConnected plain values.
    """
    channels, height, width = shapes[0]
    rows = F.reshape(xs[0], shape=(-3, -1))  # (N * C, H * W)
    ones = F.stop_gradient(F.ones_like(F.slice_axis(rows, axis=0, begin=0, end=1)))
    sums = _dense(F, rows, ones, 1, "pool")
    return F.reshape(sums / float(height * width), shape=(-1, channels, 1, 1) if layer.keepdims else (-1, channels))
