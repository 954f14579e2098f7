"""k replicas of one model in one process: split, forward/backward, AllReduce, SGD.

On CPU the replicas run one after another (measured faster here than one
thread per replica, which fights over the same cores); with sync BatchNorm
they run in lockstep threads so they can exchange statistics. On CUDA the
gradients are summed with ``torch.cuda.comm``.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from multidev.engine import (AllGather, Device, DeviceShard, MultidevError, Placed, Setup, Shards, State, StepStats,
                             run_lockstep, running_statistic, statistic_sources)

from .batchnorm import BatchNorm
from .distributed import all_sum_tensors
from .model import build


def torch_device(device: Device) -> torch.device:
    return torch.device("cuda", device.index) if device.kind == "gpu" else torch.device("cpu")


Shard = DeviceShard[torch.Tensor]
Batch = Placed[Shard]


class TorchReplicas:
    compile_seconds = 0.0

    def __init__(self, setup: Setup, state: State) -> None:
        self.setup, self.spec, self.sync = setup, setup.spec, setup.sync
        self.processes = setup.group.size
        if self.processes > 1 and self.sync and len(setup.devices) > 1:
            raise MultidevError("the torch engine syncs BatchNorm across processes with one device per process: "
                                "use --devices 1 with --processes, or batchnorm local")
        self.dtype = getattr(torch, setup.dtype)
        self._places = [torch_device(d) for d in setup.devices]
        self._cuda = any(place.type == "cuda" for place in self._places)
        base = build(self.spec)
        self.models = [copy.deepcopy(base).to(place, self.dtype) for place in self._places]
        self.load_state(state)
        self.optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in self.models]
        self._bns = [[m for m in model.modules() if isinstance(m, BatchNorm)] for model in self.models]
        for bn in self._bns[0]:
            bn.across_processes = self.processes > 1 and self.sync

    # Shard -----------------------------------------------------------------
    def place(self, shards: Shards) -> Batch:
        ys = shards.y if shards.y is not None else [None] * len(shards.x)
        return Placed([Shard(torch.from_numpy(np.ascontiguousarray(xi)).to(place, self.dtype),
                       None if yi is None else torch.from_numpy(np.ascontiguousarray(yi)).to(place), len(xi))
                       for xi, yi, place in zip(shards.x, ys, self._places)], shards)

    def shards(self, batch: list[Shard]) -> list[np.ndarray]:
        return [s.x.cpu().numpy() for s in batch]

    # Forward / backward ----------------------------------------------------
    def _logits(self, batch: list[Shard], active: list[int]) -> dict[int, torch.Tensor]:
        """Training-mode logits of every non-empty shard; lockstep threads under sync BatchNorm."""
        if not (self.sync and len(active) > 1):
            return {i: self.models[i](batch[i].x) for i in active}
        gather = AllGather(len(active))
        for rank, i in enumerate(active):
            for bn in self._bns[i]:
                bn.exchange, bn.rank = gather, rank
        try:
            return run_lockstep(lambda i: self.models[i](batch[i].x), active, gather)
        finally:
            for i in active:
                for bn in self._bns[i]:
                    bn.exchange = None

    @contextmanager
    def _full_float32(self) -> Iterator[None]:
        """cuDNN would run float32 convolutions in TF32 (a 10-bit mantissa) by default.

        Measured on an H100: one step then differs from the CPU's by 1.3% (LeNet)
        and 6% (ResNet-18), against 4e-6 without it; JAX and MXNet compute in
        full float32, so the engines would no longer agree. Restored afterwards.
        """
        if not self._cuda:
            yield
            return
        saved = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
        try:
            yield
        finally:
            torch.backends.cudnn.allow_tf32 = saved

    def _backward(self, batch: list[Shard]) -> tuple[StepStats, list[int]]:
        """Gradients of the mean loss over the whole batch, summed on every replica."""
        with self._full_float32():
            return self._backward_float32(batch)

    def _backward_float32(self, batch: Batch) -> tuple[StepStats, list[int]]:
        total = batch.host.batch  # B over every process
        active = batch.host.active
        if self.processes > 1 and self.sync:
            active = list(range(len(batch)))  # an empty shard still joins every BatchNorm exchange
        for model in self.models:
            model.train()
            model.zero_grad(set_to_none=True)
        logits = self._logits(batch, active)
        # Shard i's loss is its sum divided by the whole batch: weight n_i / B (contract: Loss, gradients and the update).
        losses = [F.cross_entropy(logits[i], batch[i].y, reduction="sum") for i in active]
        torch.autograd.backward([loss / total for loss in losses])
        self._allreduce(active)
        correct = sum(int((logits[i].argmax(1) == batch[i].y).sum()) for i in active)
        if self.processes > 1:
            self._allreduce_processes()
        return StepStats(float(sum(loss.item() for loss in losses)), correct, batch.host.total), active

    def _allreduce(self, active: list[int]) -> None:
        """Sum the active replicas' gradients and give every replica the sum."""
        if len(self.models) == 1:
            return
        params = [list(m.parameters()) for m in self.models]
        grads = [[p.grad for p in params[i]] for i in active]
        if all(place.type == "cuda" for place in self._places):
            summed = torch.cuda.comm.reduce_add_coalesced(grads, destination=self._places[0].index)
            copies = torch.cuda.comm.broadcast_coalesced(summed, [place.index for place in self._places])
            for replica, replica_grads in zip(params, copies):
                for p, g in zip(replica, replica_grads):
                    p.grad = g
            return
        with torch.no_grad():
            for per_replica in zip(*params):
                total = per_replica[active[0]].grad
                for i in active[1:]:
                    total.add_(per_replica[i].grad.to(total.device))
                for p in per_replica:
                    p.grad = total if p.device == total.device else total.to(p.device)

    def _allreduce_processes(self) -> None:
        """Sum the gradients of every process (each already holds its devices' sum) into every replica."""
        params = [list(m.parameters()) for m in self.models]
        summed = all_sum_tensors([p.grad if p.grad is not None else torch.zeros_like(p) for p in params[0]])
        for replica in params:
            for p, g in zip(replica, summed):
                p.grad = g if p.device == g.device else g.to(p.device)

    def _sync_statistics_processes(self, batch: Batch) -> None:
        """The core's rule over every device of the job: the chosen devices' statistics, summed and scaled."""
        sources, scale = statistic_sources(batch.host.group_active, self.sync)
        mine = batch.host.own(sources)
        values = []
        for layer in zip(*self._bns):
            for name in ("running_mean", "running_var"):
                own = [getattr(layer[i], name).to(self._places[0]) for i in mine]
                values.append(sum(own) if own else torch.zeros_like(getattr(layer[0], name)))
        totals = iter(all_sum_tensors(values))
        for layer in zip(*self._bns):
            for name in ("running_mean", "running_var"):
                value = next(totals) * scale
                for bn in layer:
                    getattr(bn, name).copy_(value)

    def _sync_statistics(self, active: list[int]) -> None:
        """Average running statistics over the devices that saw data, then copy to all (contract: BatchNorm)."""
        if len(self.models) == 1:
            return
        for layer in zip(*self._bns):
            for name in ("running_mean", "running_var"):
                value = running_statistic([getattr(bn, name).to(self._places[0]) for bn in layer], active, self.sync)
                for bn in layer:
                    getattr(bn, name).copy_(value)

    @contextmanager
    def _frozen_statistics(self) -> Iterator[None]:
        for bns in self._bns:
            for bn in bns:
                bn.update_stats = False
        try:
            yield
        finally:
            for bns in self._bns:
                for bn in bns:
                    bn.update_stats = True

    # Protocol --------------------------------------------------------------
    def train_step(self, batch: list[Shard], lr: float) -> StepStats:
        stats, active = self._backward(batch)
        with torch.no_grad():
            for opt in self.optimizers:
                for group in opt.param_groups:
                    group["lr"] = lr
                opt.step()
            if self.processes > 1:
                self._sync_statistics_processes(batch)
            else:
                self._sync_statistics(active)
        return stats

    def gradients(self, batch: list[Shard]) -> State:
        with self._frozen_statistics():
            self._backward(batch)
        return {name: p.grad.detach().cpu().numpy().copy() for name, p in self.models[0].named_parameters()}

    def _eval_logits(self, batch: list[Shard]) -> list[torch.Tensor]:
        with torch.no_grad(), self._full_float32():
            out = []
            for model, shard in zip(self.models, batch):
                model.eval()
                if shard.size:
                    out.append(model(shard.x))
            return out

    def evaluate(self, batch: list[Shard]) -> StepStats:
        loss, correct, count = 0.0, 0, 0
        active = [s for s in batch if s.size]
        for logits, shard in zip(self._eval_logits(batch), active):
            loss += F.cross_entropy(logits, shard.y, reduction="sum").item()
            correct += int((logits.argmax(1) == shard.y).sum())
            count += shard.size
        return StepStats(loss, correct, count)

    def predict(self, batch: list[Shard]) -> np.ndarray:
        parts = [logits.cpu().numpy() for logits in self._eval_logits(batch)]
        return np.concatenate(parts) if parts else np.zeros((0, self.spec.num_classes), np.float32)

    def replica_states(self) -> list[State]:
        return [{k: v.detach().cpu().numpy().copy() for k, v in m.state_dict().items()} for m in self.models]

    def state(self) -> State:
        return self.replica_states()[0]

    def load_state(self, state: State) -> None:
        self.spec.check(state)
        for model in self.models:
            model.load_state_dict({k: torch.from_numpy(np.array(v)).to(self.dtype) for k, v in state.items()})
