"""BatchNorm with the project's conventions, local or synchronised across contexts.

MXNet's own BatchNorm op follows the conventions once its momentum is flipped
(it keeps ``running = m * running + (1 - m) * batch``, so ``m = 1 - momentum``,
each layer's own, as its eps is)
and, like the core, it puts the biased variance into the running variance
(checked in tests/test_mxnet_engine.py). One quirk: it updates the running
statistics in the *backward* pass, not the forward.

Gluon's contrib SyncBatchNorm does not fit contract: BatchNorm: it averages the devices'
means without weighting them by shard size (inexact for uneven shards), it
needs a fixed device count (an empty shard would block it) and it hangs on CPU
contexts driven from one Python thread. So ``sync`` is done here: each active
context runs its forward pass in its own thread, and at every BatchNorm the
threads swap their shards' (mean, var, count) through a barrier. Each context
combines them on its own device through recorded cross-context copies, so one
backward pass gives the exact whole-batch gradient. Only NDArray handles cross
the barrier; MXNet computes asynchronously, so no thread waits for data there.
The per-shard arithmetic runs as two small compiled graphs, because Python's
cost per imperative MXNet op, not the arithmetic, is what made sync slow.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from multidev.engine import BN_EPS, BN_MOMENTUM, AllGather, combine_moments

from .runtime import mxnet

mx = mxnet()

nd, autograd, nn = mx.nd, mx.autograd, mx.gluon.nn


class StatsExchange:
    """The core's all-gather of shard statistics, keyed by context: one Gluon network serves every context."""

    def __init__(self, contexts: list, timeout: float = 600.0) -> None:
        self.ranks = {ctx: rank for rank, ctx in enumerate(contexts)}
        self.gather = AllGather(len(contexts), timeout)

    def abort(self) -> None:
        self.gather.abort()

    def is_leader(self, ctx: mx.Context) -> bool:
        return self.ranks[ctx] == 0

    def combine(self, mean: mx.nd.NDArray, var: mx.nd.NDArray, count: int):
        """Whole-batch (mean, biased var), weighted by shard size, on ``mean``'s context.

        Python numbers as weights and one ``add_n`` per sum: Python's cost per
        imperative MXNet op, not the arithmetic, is what makes sync slow.
        """
        here = mean.context
        parts = self.gather(self.ranks[here], (mean, var, count))
        return combine_moments(parts, move=lambda a: a.as_in_context(here), add=lambda xs: nd.add_n(*xs))


class _FixedStatistics(nn.HybridBlock):
    """Holds mean 0 and variance 1 - eps, so MXNet's BatchNorm op computes ``x * gamma + beta``.

    That eps is the op's own, whatever the layer's is. The op is fused and fast
    where MXNet's broadcast arithmetic over NCHW arrays is not, and its backward
    gives the gradients of scale and shift as those of gamma and beta. Graph ops
    may only read such statistics from variables, hence constants.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.zero = self.params.get_constant("zero", np.zeros(channels, np.float32))
        self.unit = self.params.get_constant("unit", np.full(channels, 1.0 - BN_EPS, np.float32))

    @staticmethod
    def affine(F, x, scale, shift, zero, unit):
        return F.BatchNorm(x, scale, shift, zero, unit, eps=BN_EPS, fix_gamma=False, use_global_stats=True)


def _channel_mean(F, x):
    """Per-channel mean of NCHW ``x``: global pooling, then over samples (fast, unlike reducing (0, 2, 3))."""
    return F.mean(F.reshape(F.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="avg"), shape=(0, 0)), axis=0)


class ShardMoments(_FixedStatistics):
    """A shard's per-channel mean and biased variance (two passes, no cancellation)."""

    def hybrid_forward(self, F, x, zero, unit):
        mean = _channel_mean(F, x)
        centred = self.affine(F, x, F.ones_like(mean), -mean, zero, unit)
        return mean, _channel_mean(F, F.square(centred))


class Normalize(_FixedStatistics):
    """``(x - mean) / sqrt(var + eps) * gamma + beta``, differentiable in all five."""

    def __init__(self, channels: int, eps: float) -> None:
        super().__init__(channels)
        self.eps = eps

    def hybrid_forward(self, F, x, mean, var, gamma, beta, zero, unit):
        scale = gamma * F.rsqrt(var + self.eps)
        return self.affine(F, x, scale, beta - mean * scale, zero, unit)


class BatchNorm(nn.BatchNorm):
    """Gluon's BatchNorm with the layer's eps and momentum (torch's convention); whole-batch statistics while
    ``exchange`` is set.

    With ``sync`` the layer also carries the compiled pieces of the exchange;
    running statistics are then blended once per step, on one context, by
    :meth:`fold_batch_statistics`.
    """

    def __init__(self, channels: int, sync: bool = False, eps: float = BN_EPS, momentum: float = BN_MOMENTUM) -> None:
        super().__init__(momentum=1.0 - momentum, epsilon=eps, in_channels=channels)
        self.momentum = momentum  # torch's: the weight of the batch's statistic
        if sync:
            with self.name_scope():
                self.moments = ShardMoments(channels)
                self.normalize = Normalize(channels, eps)
        self.exchange: Optional[StatsExchange] = None
        self.batch_statistics: Optional[tuple[mx.nd.NDArray, mx.nd.NDArray]] = None
        self.blends = False

    def blend_statistics(self) -> None:
        """Blend the running statistics here, in the arrays' precision: the op takes its momentum as a 32-bit
        float (0.9 is 2.4e-8 off), which a float64 run must not. The op's momentum becomes 1, which keeps
        them exactly; the layer then runs outside a compiled graph."""
        self._kwargs["momentum"] = 1.0
        self.blends = True

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        if self.exchange is None and self.blends and autograd.is_training():
            return self._blended(x, gamma, beta, running_mean, running_var)
        if self.exchange is None or not autograd.is_training():
            return super().hybrid_forward(F, x, gamma, beta, running_mean, running_var)
        if F is not nd:
            raise RuntimeError("sync BatchNorm runs imperatively: do not hybridize a block that holds it")
        mean, var = self.moments(x)
        mean, var = self.exchange.combine(mean, var, x.size // x.shape[1])
        if self.exchange.is_leader(x.context):
            self.batch_statistics = (mean.detach(), var.detach())
        return self.normalize(x, mean, var, gamma, beta)

    def _blended(self, x, gamma, beta, running_mean, running_var):
        """The op's normalisation and gradients; the batch's (mean, biased var) blended into the running ones."""
        if not isinstance(x, nd.NDArray):
            raise RuntimeError("a BatchNorm that blends its own statistics runs imperatively: do not hybridize it")
        out, mean, invstd = nd.BatchNorm(x, gamma, beta, running_mean, running_var, output_mean_var=True,
                                         **self._kwargs)
        with autograd.pause():
            var = 1.0 / (invstd * invstd) - self._kwargs["eps"]  # the op keeps 1 / sqrt(var + eps)
            for running, batch in ((running_mean, mean), (running_var, var)):
                running[:] = (1.0 - self.momentum) * running + self.momentum * batch
        return out

    def fold_batch_statistics(self) -> None:
        """Blend the last exchange's whole-batch statistics into the running ones, on the leader's context.

        The caller then copies the leader's running statistics to every context.
        """
        if self.batch_statistics is None:
            return
        for param, batch in zip((self.running_mean, self.running_var), self.batch_statistics):
            running = param.data(batch.context)
            running[:] = (1.0 - self.momentum) * running + self.momentum * batch
        self.batch_statistics = None
