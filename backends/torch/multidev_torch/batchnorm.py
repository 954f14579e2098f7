"""BatchNorm with the project's conventions, local or synchronised across replicas.

PyTorch's own SyncBatchNorm needs a torch.distributed process group; here all
replicas live in one process, so the shards' statistics are exchanged through
the core's ``AllGather`` while each replica runs its forward pass in its own
thread (``multidev.engine.run_lockstep``). The exchanged tensors keep their autograd
history, so one backward pass gives the exact whole-batch gradient (contract: BatchNorm).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from multidev.engine import BN_EPS, BN_MOMENTUM, AllGather, combine_moments


class BatchNorm(nn.Module):
    """Per-channel BatchNorm for NCHW or NC input, canonical parameter names; the layer's own eps and momentum."""

    def __init__(self, channels: int, eps: float = BN_EPS, momentum: float = BN_MOMENTUM) -> None:
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.exchange: Optional[AllGather] = None  # replicas in this process (threads)
        self.rank = 0
        self.across_processes = False  # sync over the processes of a job (one device each)
        self.update_stats = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.gamma, self.beta,
                                training=False, eps=self.eps)
        if self.exchange is None and not self.across_processes and not x.shape[0]:
            # No rows (a process's empty shard under FSDP2, which still runs its pass to join the collectives): no
            # statistics to take, an empty output that keeps gamma and beta in the graph (their gradient: zeros)
            shape = [1, -1] + [1] * (x.dim() - 2)
            return (x * self.gamma.view(shape) + self.beta.view(shape)).to(x.dtype)
        if self.exchange is None and not self.across_processes:
            # Local statistics: torch's fused kernel. Its own running update would store the
            # unbiased variance, so the update is done here with the biased one (docs/contract.md).
            # Under autocast it takes bfloat16 input and float32 parameters: float32 statistics, bfloat16 output.
            out, mean, invstd = torch.native_batch_norm(x, self.gamma, self.beta, None, None, True, 0.0, self.eps)
            if self.update_stats:
                with torch.no_grad():
                    self.running_mean.lerp_(mean, self.momentum)
                    self.running_var.lerp_(invstd.pow(-2) - self.eps, self.momentum)
            return out
        dims = [0, *range(2, x.dim())]
        count = x.numel() // x.shape[1]
        # bfloat16 input (autocast): statistics and normalisation in the statistics' dtype, as the fused kernel does
        wide = x.to(torch.promote_types(x.dtype, self.running_mean.dtype))
        if count:
            var, mean = torch.var_mean(wide, dim=dims, unbiased=False)
        else:  # an empty shard still takes part in the exchange (its weight is 0)
            mean = var = wide.sum(dim=dims)
        if self.across_processes:
            parts = self._gather_processes(mean, var, count)
        else:
            parts = self.exchange(self.rank, (mean, var, count))
        mean, var = combine_moments(parts, move=lambda t: t.to(x.device))
        if self.update_stats:
            with torch.no_grad():
                self.running_mean.lerp_(mean.detach(), self.momentum)
                self.running_var.lerp_(var.detach(), self.momentum)
        shape = [1, -1] + [1] * (x.dim() - 2)
        scale = self.gamma * torch.rsqrt(var + self.eps)
        return ((wide - mean.view(shape)) * scale.view(shape) + self.beta.view(shape)).to(x.dtype)

    @staticmethod
    def _gather_processes(mean: torch.Tensor, var: torch.Tensor, count: int) -> list:
        """Every process's (mean, variance, count), with autograd through torch.distributed."""
        from .distributed import GatherAll
        channels = mean.shape[0]
        rows = GatherAll.apply(torch.cat([mean, var, mean.new_full((1,), float(count))]))
        counts = [int(c) for c in rows[:, -1].detach().tolist()]
        return [(row[:channels], row[channels:2 * channels], n) for row, n in zip(rows, counts) if n > 0]
