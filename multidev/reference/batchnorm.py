"""BatchNorm with the project's conventions, local or synchronised across devices.

The only layer whose devices talk to each other. With ``local`` statistics
each device normalises its shard by the shard's own mean and variance; with
``sync`` every device uses the whole minibatch's, which takes an all-reduce
of per-shard sums in the forward pass and, because every sample's output then
depends on every other device's samples, another one in the backward pass.

Let S be the samples the statistics run over (one shard, or the whole batch),
x^ = (x - mean_S) / sqrt(var_S + eps) and y = gamma * x^ + beta. Then

    dL/dx = gamma / sqrt(var_S + eps) * (dy - mean_S(dy) - x^ * mean_S(dy * x^))

so local and sync BatchNorm differ only in where the sums over S come from:
the shard itself, or all shards added up (``_over_s`` below). The parameter
gradients stay per-device sums; the AllReduce in ``parallel.py`` adds them.
"""

from __future__ import annotations

import numpy as np

from multidev.rules.batchnorm import BN_EPS, BN_MOMENTUM

def _axes(x: np.ndarray) -> tuple[int, ...]:
    """Statistics per channel: over samples and pixels for NCHW images, over samples for (N, F) features."""
    return (0, *range(2, x.ndim))


def _per_channel(v: np.ndarray, ndim: int = 4) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _over_s(parts: list, sync: bool) -> list:
    """Each device's sum over S: its own part (local), or every part added up (sync, an all-reduce).

    Under sync all devices get the *same* array object, so they stay bit-identical.
    """
    if not sync:
        return parts
    total = sum(parts)
    return [total] * len(parts)


class BatchNorm:
    """One BatchNorm layer, run on every active device at once (see ``model.Run``).

    ``eps`` and ``momentum`` are the layer's (``multidev.nn.BatchNorm``): the contract's constants are only defaults.
    """

    def __init__(self, name: str, eps: float = BN_EPS, momentum: float = BN_MOMENTUM) -> None:
        self.name, self.eps, self.momentum = name, eps, momentum
        self.saved: list = []

    def forward(self, run, xs: list[np.ndarray]) -> list[np.ndarray]:
        names = [f"{self.name}.{k}" for k in ("gamma", "beta", "running_mean", "running_var")]
        gamma, beta, r_mean, r_var = ([p[n] for p in run.params] for n in names)
        if not run.train:  # inference: the running statistics, nothing to exchange
            return [_per_channel(g / np.sqrt(v + self.eps), x.ndim) * (x - _per_channel(m, x.ndim))
                    + _per_channel(b, x.ndim) for x, g, b, m, v in zip(xs, gamma, beta, r_mean, r_var)]

        nd, axes = xs[0].ndim, _axes(xs[0])
        counts = _over_s([x.size // x.shape[1] for x in xs], run.sync)
        means = [s / n for s, n in zip(_over_s([x.sum(axis=axes) for x in xs], run.sync), counts)]
        centred = [x - _per_channel(m, nd) for x, m in zip(xs, means)]
        # Two passes (mean, then the mean square about it), as one device computes
        # it: E[x^2] - E[x]^2 in float32 would lose the digits the kit checks.
        variances = [s / n for s, n in zip(_over_s([(c * c).sum(axis=axes) for c in centred], run.sync), counts)]
        inv_std = [1.0 / np.sqrt(v + self.eps) for v in variances]

        if run.update_stats:
            # Biased variance (divided by n): the contract's choice. Replicas
            # are made identical again afterwards, in parallel.py.
            for p, m, v in zip(run.params, means, variances):
                p[names[2]] = (1 - self.momentum) * p[names[2]] + self.momentum * m
                p[names[3]] = (1 - self.momentum) * p[names[3]] + self.momentum * v

        xhat = [c * _per_channel(s, nd) for c, s in zip(centred, inv_std)]
        self.saved = list(zip(xhat, inv_std, gamma, counts))
        return [_per_channel(g, nd) * xh + _per_channel(b, nd) for xh, g, b in zip(xhat, gamma, beta)]

    def backward(self, run, dys: list[np.ndarray]) -> list[np.ndarray]:
        nd, axes = dys[0].ndim, _axes(dys[0])
        sum_dy = [dy.sum(axis=axes) for dy in dys]
        sum_dy_xhat = [(dy * xh).sum(axis=axes) for dy, (xh, *_) in zip(dys, self.saved)]
        for g, d_beta, d_gamma in zip(run.grads, sum_dy, sum_dy_xhat):
            g[f"{self.name}.beta"], g[f"{self.name}.gamma"] = d_beta, d_gamma
        # The statistics' share of the gradient: means over S, summed across devices under sync.
        sum_dy, sum_dy_xhat = _over_s(sum_dy, run.sync), _over_s(sum_dy_xhat, run.sync)
        dxs = []
        for dy, (xh, inv_std, gamma, n), s1, s2 in zip(dys, self.saved, sum_dy, sum_dy_xhat):
            dxs.append(_per_channel(gamma * inv_std, nd) * (dy - _per_channel(s1 / n, nd)
                                                             - xh * _per_channel(s2 / n, nd)))
        self.saved = []
        return dxs
