"""Sharded data parallelism over processes by PyTorch's own FSDP2 (``fully_shard``): one device per process.

Where a CPU job has one device per process and shards its gradients or its
parameters (ZeRO's stages 2 and 3), ``torch.distributed.fsdp.fully_shard``
shards the model over the job's gloo process group: it reduce-scatters the
gradients in the backward and all-gathers the parameters before a forward
(``reshard_after_forward`` at ``parameters`` only), and one ``torch.optim``
optimizer steps this process's rows (the DTensor shards). The engine's own
owners (:mod:`.sharding`) keep every other form: one process with several
devices, several devices per process, the level ``optimizer`` (FSDP2 has no
ZeRO-1), GPUs, NHWC kernels (FSDP2 takes contiguous parameters only, and a
kernel in another memory form may convolve to other bits) and parameters
without rows (FSDP2 refuses scalars).

Why the replicated run's numbers come out:

- FSDP2's rows are ``torch.chunk``'s along dim 0: ``ceil(n / W)`` in rank
  order, the core's rule (``Setup.owned``; checked when the model is sharded).
- Sums, not means: each process's loss is already over the whole batch, so
  the divide factor is 1 with sum-only collectives (``ReduceOp.SUM``; FSDP2
  skips a factor of 1: no scaling at all).
- Micro-batches add up in each process's whole gradient (no gradient sync
  until the update's last), then one reduce-scatter: the local sum first,
  then across the processes, as the replicated run adds. Two processes' sum
  is the same bits in either order; with more, gloo may add in another order.
- A process whose shard is empty still runs its forward and backward on no
  rows, so it joins every collective (its gradient is zeros: x + 0 is x).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, cast

import numpy as np
import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule

from multidev.engine import STEP, MultidevError, Setup, State, slot_name

from .distributed import peers
from .optimizers import SLOTS, Update, state_bytes

#: the levels FSDP2 takes (it has no ZeRO-1: its optimizer state follows the parameters it shards)
LEVELS = ("gradients", "parameters")
#: what a run's result says the gradients crossed the processes through
SUMS = "FSDP2 (fully_shard) over gloo"


def applies(setup: Setup, model: torch.nn.Module, layout: torch.memory_format, cuda: bool) -> bool:
    """Whether FSDP2 shards this run: one CPU device per process of a job, a level it has, contiguous
    parameters with rows (else the engine's own owners, which keep the replicated run's bits in every form)."""
    params = list(model.parameters())
    return (len(setup.devices) == 1 and setup.group.size > 1 and setup.shard in LEVELS and not cuda
            and layout == torch.contiguous_format and bool(params) and all(p.dim() for p in params))


def _local(value: torch.Tensor) -> torch.Tensor:
    """This process's rows of a DTensor (the tensor itself where it is not one), to write in place."""
    from torch.distributed.tensor import DTensor

    return value.to_local() if isinstance(value, DTensor) else value


def _whole(value: torch.Tensor) -> np.ndarray:
    """A canonical host array of a DTensor's whole (an all-gather: every process calls it at the same moment)."""
    from torch.distributed.tensor import DTensor

    with torch.no_grad(), peers():
        full = value.full_tensor() if isinstance(value, DTensor) else value
        return full.detach().cpu().numpy().copy()


class FullyShard:
    """One process's model under FSDP2, the optimizer over its shards, and their state in canonical names."""

    def __init__(self, setup: Setup, model: torch.nn.Module) -> None:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard  # here: its import costs every run's start half a second

        self.setup, self.level = setup, setup.shard
        self.order = list(model.state_dict())  # canonical names, in the replicated run's order
        mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
        fully_shard(model, mesh=mesh, reshard_after_forward=self.level == "parameters")
        self.model = cast("FSDPModule", model)
        self.model.set_gradient_divide_factor(1.0)  # sums: each process's loss is over the whole batch already
        self.model.set_force_sum_reduction_for_comms(True)  # ReduceOp.SUM (gloo has no PREMUL_SUM), no scaling
        #: name -> the DTensor shard FSDP2 made of it (the optimizer's parameters; the module holds them between
        #: steps at ``parameters``)
        self.params = dict(model.named_parameters())
        self.rows = {name: setup.owned(p.shape[0])[0] for name, p in self.params.items()}
        for name, p in self.params.items():
            a, b = self.rows[name]
            if _local(p).shape[0] != b - a:
                raise MultidevError(f"FSDP2 gave rank {setup.group.rank} {_local(p).shape[0]} rows of {name}, "
                                    f"the sharding rule {b - a}: the torch engine cannot shard this job with it")
        self.optimizer = Update(setup.optimizer, self.params.values())

    # The step ----------------------------------------------------------------------------------------------
    def sync(self, last: bool) -> None:
        """Reduce-scatter in this backward only where it is the update's last micro-batch (the others add up in
        the whole gradient, as the replicated run's do)."""
        self.model.set_requires_gradient_sync(last)

    def step(self, lr: float) -> None:
        """This process's rows updated from its rows of the summed gradient; at ``gradients`` the whole
        parameters gathered again at once (ZeRO-2 holds them between updates)."""
        self.optimizer.step(lr)
        self.optimizer.zero_grad()  # FSDP2 would add the next update's rows to these
        if self.level == "gradients":
            with peers():
                self.model.unshard()

    def gradients(self) -> State:
        """The whole summed gradient of the last backward (gathered from the shards), which then is dropped."""
        out = {name: _whole(p.grad) for name, p in self.params.items() if p.grad is not None}
        self.optimizer.zero_grad()
        return out

    @contextmanager
    def whole(self) -> Iterator[None]:
        """The whole parameters for a pass that does not update (an all-gather), released after at ``parameters``.

        Every process enters it, a process with no rows to evaluate too."""
        with peers():
            self.model.unshard()
        try:
            yield
        finally:
            if self.level == "parameters":
                self.model.reshard()

    # State -------------------------------------------------------------------------------------------------
    def state(self) -> State:
        """The canonical parameters (whole, gathered from the shards) and running statistics."""
        buffers = dict(cast(torch.nn.Module, self.model).named_buffers())
        return {name: _whole(self.params[name]) if name in self.params else _whole(buffers[name])
                for name in self.order}

    def load(self, state: State) -> None:
        """Canonical whole arrays: this process's rows into its shards, the running statistics whole."""
        self.model.reshard()  # the next pass gathers the loaded rows
        module = cast(torch.nn.Module, self.model)
        with torch.no_grad():
            for name, p in self.params.items():
                a, b = self.rows[name]
                _local(p).copy_(torch.from_numpy(np.array(state[name])[a:b]))
            for name, buffer in module.named_buffers():
                buffer.copy_(torch.from_numpy(np.array(state[name])))

    def optimizer_state(self, updates: int) -> State:
        """The whole optimizer state in canonical names (zeros for a slot torch has not made yet)."""
        state: State = {STEP: np.array(updates, np.int64)}
        for slot in self.setup.optimizer.slots:
            for name in self.setup.spec.trainable():
                p = self.params[name]
                held = self.optimizer.state.get(p, {}).get(SLOTS[slot])
                state[slot_name(slot, name)] = _whole(torch.zeros_like(p) if held is None else held)
        return state

    def load_optimizer_state(self, state: State) -> None:
        """This process's rows of the canonical state into its optimizer (AdamW's count: the update count)."""
        updates = int(state[STEP])
        with torch.no_grad():
            for name, p in self.params.items():
                a, b = self.rows[name]
                held: dict[str, torch.Tensor] = {}
                for slot in self.setup.optimizer.slots:
                    value = torch.empty_like(p)
                    _local(value).copy_(torch.from_numpy(np.array(state[slot_name(slot, name)])[a:b]))
                    held[SLOTS[slot]] = value
                if self.setup.optimizer.name == "adamw":
                    held["step"] = torch.tensor(float(updates))
                self.optimizer.state[p] = held

    def held_bytes(self) -> list[dict[str, int]]:
        """What this process's device holds between updates: the parameters the module holds (its rows at
        ``parameters``, the whole at ``gradients``) and its rows of the optimizer state."""
        module = cast(torch.nn.Module, self.model)
        params = sum(_local(p).nbytes for p in module.parameters())
        return [{"parameters": int(params), "optimizer": state_bytes(self.optimizer, _local)}]
