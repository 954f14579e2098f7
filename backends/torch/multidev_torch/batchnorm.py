"""BatchNorm with the project's conventions, local or synchronised across replicas.

PyTorch's own SyncBatchNorm needs a torch.distributed process group; here all
replicas live in one process, so the shards' statistics are exchanged through
a barrier while each replica runs its forward pass in its own thread. The
exchanged tensors keep their autograd history, so one backward pass gives the
exact whole-batch gradient (contract: BatchNorm).
"""

from __future__ import annotations

import threading
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from multidev.engine import BN_EPS, BN_MOMENTUM


class StatsExchange:
    """All-gather of per-shard (mean, var, count) among the replicas of one step."""

    def __init__(self, parties: int, timeout: float = 600.0) -> None:
        self.parties = parties
        self._barrier = threading.Barrier(parties, timeout=timeout)
        self._slots: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, int]] = {}
        self._calls = [0] * parties

    def abort(self) -> None:
        self._barrier.abort()

    def combine(self, rank: int, mean: torch.Tensor, var: torch.Tensor, count: int):
        call = self._calls[rank]
        self._calls[rank] += 1
        self._slots[(call, rank)] = (mean, var, count)
        self._barrier.wait()
        parts = [self._slots[(call, r)] for r in range(self.parties)]
        total = sum(c for _, _, c in parts)
        means = [m.to(mean.device) for m, _, _ in parts]
        g_mean = sum(m * (c / total) for m, (_, _, c) in zip(means, parts))
        g_var = sum((v.to(mean.device) + (m - g_mean) ** 2) * (c / total)
                    for m, (_, v, c) in zip(means, parts))
        return g_mean, g_var


class BatchNorm(nn.Module):
    """Per-channel BatchNorm for NCHW or NC input, canonical parameter names."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.exchange: Optional[StatsExchange] = None
        self.rank = 0
        self.update_stats = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.gamma, self.beta,
                                training=False, eps=BN_EPS)
        if self.exchange is None:
            # Local statistics: torch's fused kernel. Its own running update would store the
            # unbiased variance, so the update is done here with the biased one (docs/contract.md).
            out, mean, invstd = torch.native_batch_norm(x, self.gamma, self.beta, None, None, True, 0.0, BN_EPS)
            if self.update_stats:
                with torch.no_grad():
                    self.running_mean.lerp_(mean, BN_MOMENTUM)
                    self.running_var.lerp_(invstd.pow(-2) - BN_EPS, BN_MOMENTUM)
            return out
        dims = [0, *range(2, x.dim())]
        var, mean = torch.var_mean(x, dim=dims, unbiased=False)
        mean, var = self.exchange.combine(self.rank, mean, var, x.numel() // x.shape[1])
        if self.update_stats:
            with torch.no_grad():
                self.running_mean.lerp_(mean.detach(), BN_MOMENTUM)
                self.running_var.lerp_(var.detach(), BN_MOMENTUM)
        shape = [1, -1] + [1] * (x.dim() - 2)
        scale = self.gamma * torch.rsqrt(var + BN_EPS)
        return (x - mean.view(shape)) * scale.view(shape) + self.beta.view(shape)
