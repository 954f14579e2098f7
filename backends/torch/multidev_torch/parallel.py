"""k replicas of one model in one process: place the shards, forward/backward, AllReduce, update, state.

On CPU the replicas run one after another (measured faster here than one
thread per replica, which fights over the same cores); with sync BatchNorm
they run in lockstep threads so they can exchange statistics. On CUDA the
gradients are summed with ``torch.cuda.comm``. Each replica holds its own
``torch.optim`` optimizer (see :mod:`.optimizers`); they see the same summed
gradient and step alike.
Micro-batches accumulate in each replica's own ``.grad`` (autograd adds up),
summed over devices and processes once, before the update (as DDP's ``no_sync``).
On a GPU the forms of :mod:`.gpu` apply (cuDNN's algorithm timing, NHWC images), on a CPU the layout
:mod:`.cpu` timed.
Running statistics are made equal after every micro-batch by one rule, in a
process or a job: the core's ``statistic_sources``, summed here and, in a
job, over the processes (``all_sum_tensors``).
A sharded run (``--shard``) keeps each device's rows: by PyTorch's FSDP2 where a CPU job has one device per
process at ``gradients`` or ``parameters`` (:mod:`.fsdp`), else by the engine's own owners (:mod:`.sharding`).
"""

from __future__ import annotations

import contextlib
import copy
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ContextManager, Iterator, Optional

import numpy as np
import torch
import torch.nn.functional as F

from multidev.engine import (STEP, AllGather, DeviceShard, HostSum, MultidevError, Placed, ReplicaStates, Setup, Shards,
                             WaitedSteps,
                             State, StepStats, labels, predictions, run_lockstep, statistic_sources)

from . import cpu_layout, fsdp, gpu, optimizers
from .batchnorm import BatchNorm
from .devices import torch_device
from .distributed import all_sum_tensors, host_sum, peers
from .model import MASKS_MISSING, Masks, build
from .sharding import Owners


@dataclass(frozen=True)
class Shard(DeviceShard[torch.Tensor]):
    """One device's placed shard; in training a model with Dropout, the core's multipliers for its rows beside it."""

    masks: Masks = None


Batch = Placed[Shard]


@dataclass(frozen=True)
class Sums:
    """A step's loss sum and right answers, (2,) float64 (``pending_stats``); ``done`` is the GPU's copy to the host.

    ``sums`` is None where this process had no rows."""

    sums: Optional[torch.Tensor]
    total: int
    done: Optional[torch.cuda.Event] = None

    def result(self) -> StepStats:
        if self.sums is None:
            return StepStats(0.0, 0, self.total)
        if self.done is not None:
            self.done.synchronize()
        loss, correct = self.sums.tolist()
        return StepStats(loss, int(correct), self.total)


def _tensor(array: np.ndarray, place: torch.device, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(place, dtype)


class TorchReplicas(WaitedSteps, ReplicaStates):
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
        self.forms = gpu.chosen(setup.precision, self._cuda) | cpu_layout.chosen(setup, base, self._cuda)
        self._layout = torch.channels_last if "channels_last" in self.forms else torch.contiguous_format
        if "cudagraphs" in self.forms and setup.accumulate > 1:
            raise MultidevError(f"{gpu.ENV} names cudagraphs, whose replays would overwrite the gradients that "
                                f"micro-batches add up: leave cudagraphs out with --accumulate (compile may stay)")
        self.models = [copy.deepcopy(base).to(place, self.dtype).to(memory_format=self._layout)
                       for place in self._places]
        self.load_state(state)
        self._calls = [gpu.Forward(m, self.forms) for m in self.models]  # what runs each replica's forward
        # a definition without parameters (an imported graph of operations) has nothing to train: no optimizer
        self._trains = any(True for _ in base.parameters())
        #: one device per process at ``gradients`` or ``parameters``: PyTorch's FSDP2 shards the model (fsdp.py)
        self._fsdp = fsdp.FullyShard(setup, self.models[0]) \
            if fsdp.applies(setup, self.models[0], self._layout, self._cuda) else None
        if self._fsdp is not None:
            self.process_sums = fsdp.SUMS
        #: else a sharded run's owners of each parameter's rows and their optimizers (sharding.py); None: replicated
        self._owners = Owners(setup, self.models, self._layout, self.shared_sum) \
            if setup.shard != "none" and self._trains and self._fsdp is None else None
        self.optimizers = [optimizers.Update(setup.optimizer, m.parameters()) for m in self.models] \
            if self._trains and self._owners is None and self._fsdp is None else []
        self._updates = 0      # optimizer.step: updates done
        self._holding = False  # replicas' .grad hold micro-batches of an update not yet made
        self._bf16 = setup.precision == "bf16"
        self._bns = [[m for m in model.modules() if isinstance(m, BatchNorm)] for model in self.models]
        self._dropout = bool(self.spec.dropouts())
        self._host_sum: Optional[list[Optional[HostSum]]] = None  # made at the first sum over processes
        for bn in self._bns[0]:
            bn.across_processes = self.processes > 1 and self.sync

    # Shard -----------------------------------------------------------------
    def place(self, shards: Shards) -> Batch:
        """Each device's rows, labels and Dropout multipliers (``shards.masks``, when the core drew any) on it."""
        def masks(i: int) -> Masks:
            if shards.masks is None:
                return None
            return {node: _tensor(rows[i], self._places[i], self.dtype) for node, rows in shards.masks.items()}
        return Placed([Shard(self._images(_tensor(xi, place, self.dtype)), None if yi is None else _tensor(yi, place),
                             len(xi), masks(i))
                       for i, (xi, yi, place) in enumerate(zip(shards.x, labels(shards), self._places))], shards)

    def _images(self, x: torch.Tensor) -> torch.Tensor:
        """Images in the layout the forms chose (NHWC in memory under ``channels_last``; the shape stays NCHW)."""
        return x.contiguous(memory_format=self._layout) if x.dim() == 4 else x

    def shards(self, batch: list[Shard]) -> list[np.ndarray]:
        return [s.x.cpu().numpy() for s in batch]

    # Forward / backward ----------------------------------------------------
    def _forward(self, i: int, x: torch.Tensor, masks: Masks = None) -> torch.Tensor:
        """Replica i's logits, in bfloat16 under ``precision="bf16"`` (autocast is per thread: entered here)."""
        with torch.autocast(self._places[i].type, dtype=torch.bfloat16, enabled=self._bf16):
            return self._calls[i](x, masks)

    def _logits(self, batch: list[Shard], active: list[int]) -> dict[int, torch.Tensor]:
        """Training-mode logits of every non-empty shard; lockstep threads under sync BatchNorm."""
        if not (self.sync and len(active) > 1):
            return {i: self._forward(i, batch[i].x, batch[i].masks) for i in active}
        gather = AllGather(len(active))
        for rank, i in enumerate(active):
            for bn in self._bns[i]:
                bn.exchange, bn.rank = gather, rank
        try:
            return run_lockstep(lambda i: self._forward(i, batch[i].x, batch[i].masks), active, gather)
        finally:
            for i in active:
                for bn in self._bns[i]:
                    bn.exchange = None

    def _flags(self) -> ContextManager[None]:
        """cuDNN's flags for a step: TF32 as the run asks (off by default), algorithm timing as the forms chose."""
        return gpu.flags(self._cuda, self.setup.tf32, "benchmark" in self.forms)

    def _backward(self, batch: Batch) -> Sums:
        """Each replica's gradient of its shards' loss over the whole update's B, added to what its .grad holds.

        Under FSDP2 the pass gathers the parameters and scatters the gradient: a peer gone is one line."""
        with self._flags(), peers(around=True) if self._fsdp is not None else contextlib.nullcontext():
            return self._backward_micro(batch)

    def _backward_micro(self, batch: Batch) -> Sums:
        if self._dropout and batch.host.masks is None:
            raise MultidevError(MASKS_MISSING)
        total = batch.host.batch  # B over every process and micro-batch of the update
        active = batch.host.active
        if (self.processes > 1 and self.sync) or self._fsdp is not None:
            active = list(range(len(batch)))  # an empty shard still joins every BatchNorm exchange and FSDP2 collective
        if self._owners is not None:
            self._owners.gather()  # the whole parameters for this pass, from their owners
        for model in self.models:
            model.train()
            if not self._holding:
                model.zero_grad(set_to_none=True)
        self._holding = True
        gpu.step_begins(self.forms)
        logits = self._logits(batch, active)
        # Shard i's loss is its sum over the whole batch: weight n_i / B (contract: Loss, gradients and the update).
        # In the parameters' dtype: float32 from bfloat16 logits (contract: Mixed precision).
        losses = [F.cross_entropy(logits[i].to(self.dtype), batch[i].y, reduction="sum") for i in active]
        if self._trains:
            torch.autograd.backward([loss / total for loss in losses])
        return self._to_host(losses, [(logits[i].argmax(1) == batch[i].y).sum() for i in active], batch.host.total)

    def _to_host(self, losses: list[torch.Tensor], corrects: list[torch.Tensor], total: int) -> Sums:
        """The summed loss and count of right answers in one copy to the host: each ``.item()`` makes the host
        wait for the GPU, and a host that waits cannot queue the next step's work meanwhile. From a GPU the copy
        is queued behind the step (pinned memory, an event to wait on), so that reading it waits for this step
        only, not for whatever was queued after it."""
        if not losses:
            return Sums(None, total)
        home = self._places[0]
        sums = [torch.stack([t.detach().to(home, torch.float64) for t in ts]).sum() for ts in (losses, corrects)]
        both = torch.stack(sums)
        if both.device.type != "cuda":
            return Sums(both, total)
        host = torch.empty(2, dtype=torch.float64, pin_memory=True)
        host.copy_(both, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(both.device))
        return Sums(host, total, done)

    def _reduce(self) -> None:
        """AllReduce of the gradients the replicas hold, over devices then processes; the next backward starts afresh.

        Linear, so summing once per update equals summing every micro-batch.
        """
        self._holding = False
        if not self._trains:
            return
        holding = [i for i, m in enumerate(self.models) if next(m.parameters()).grad is not None]
        if holding:
            self._allreduce(holding)
        if self.processes > 1:
            self._allreduce_processes()

    def _allreduce(self, active: list[int]) -> None:
        """Sum the gradients of the replicas that hold any (``active``) and give every replica the sum."""
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

    def shared_sum(self) -> Optional[HostSum]:
        """The parameters' sum through this machine's shared memory, opened at the first call (a collective); None
        where the job sums through gloo or NCCL."""
        if self._host_sum is None:
            self._host_sum = [host_sum(sum(p.numel() for p in self.models[0].parameters()), self.dtype)]
            self.process_sums = "shared memory" if self._host_sum[0] else ("nccl" if self._cuda else "gloo")
        return self._host_sum[0]

    def _allreduce_processes(self) -> None:
        """Sum the gradients of every process (each already holds its devices' sum) into every replica.

        Through this machine's shared memory where the whole job is on it (``distributed.host_sum``), else gloo.
        """
        params = [list(m.parameters()) for m in self.models]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params[0]]
        shared = self.shared_sum()
        if shared is None:
            summed = all_sum_tensors(grads)
        else:
            torch.cat([g.reshape(-1) for g in grads], out=torch.from_numpy(shared.slot()))
            # views of the shared total, not copies: the next sum overwrites it only once every process is past its
            # next backward, which starts with gradients of its own (a copy cost 6 ms; a fresh buffer's page faults 18)
            summed = torch._utils._unflatten_dense_tensors(torch.from_numpy(shared.sum()), grads)
        for replica in params:
            for p, g in zip(replica, summed):
                p.grad = g if p.device == g.device else g.to(p.device)

    def _sync_statistics(self, batch: Batch) -> None:
        """Make every replica's running statistics the same (contract: BatchNorm), in a process or a job.

        The rule (which devices of the job, what factor) is the core's
        ``statistic_sources``: this process sums its own sources (zeros where
        it holds none), in a job the processes' sums are summed in one
        collective, and every replica takes the sum times the factor.
        """
        if len(self.models) == 1 and self.processes == 1:
            return
        sources, scale = statistic_sources(batch.host.group_active, self.sync)
        mine = batch.host.own(sources)
        values = []
        for layer in zip(*self._bns):
            for name in ("running_mean", "running_var"):
                own = [getattr(layer[i], name).to(self._places[0]) for i in mine]
                values.append(sum(own) if own else torch.zeros_like(getattr(layer[0], name)))
        totals = iter(all_sum_tensors(values) if self.processes > 1 else values)
        for layer in zip(*self._bns):
            for name in ("running_mean", "running_var"):
                value = next(totals) * scale
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
    def queue_step(self, batch: Batch, lr: float) -> Sums:
        if self._fsdp is not None:
            self._fsdp.sync(last=True)
        stats = self._backward(batch)
        with torch.no_grad():
            if self._fsdp is not None:
                self._holding = False  # FSDP2 reduce-scattered the gradient in the backward
                self._fsdp.step(lr)
            elif self._owners is not None:
                self._sharded_update(lr)
            else:
                self._reduce()
                for opt in self.optimizers:
                    opt.step(lr)
            self._updates += 1
            self._sync_statistics(batch)
        return stats

    def _sharded_update(self, lr: float) -> None:
        """Each owner's rows of the gradient (all-reduced, or reduce-scattered in one process), its update, and the
        rows gathered back (contract: Sharding)."""
        owners = self._owners
        assert owners is not None
        if owners.parts["gradients"] and self.processes == 1:
            self._holding = False
            owners.scatter(summed=False)
        else:  # across processes the replicated run's sums, so the same additions; each owner keeps its rows
            self._reduce()
            owners.scatter(summed=True)
        owners.step(lr)

    def queue_accumulate(self, batch: Batch) -> Sums:
        if self._fsdp is not None:
            self._fsdp.sync(last=False)
        stats = self._backward(batch)  # added to the gradients the replicas hold
        with torch.no_grad():
            self._sync_statistics(batch)  # running statistics move with every micro-batch
        return stats

    def gradients(self, batch: Batch) -> State:
        self._holding = False  # a gradient of this batch alone
        if self._fsdp is not None:
            self._fsdp.sync(last=True)
        with self._frozen_statistics():
            self._backward(batch)
        if self._fsdp is not None:
            return self._fsdp.gradients()
        self._reduce()
        grads = {name: p.grad.detach().cpu().numpy().copy() for name, p in self.models[0].named_parameters()}
        if self._owners is not None:
            self._owners.release()
        return grads

    def optimizer_state(self) -> State:
        """Device 0's torch optimizer state under canonical names (sharded: gathered from its owners)."""
        if self._fsdp is not None:
            return self._fsdp.optimizer_state(self._updates)
        if self._owners is not None:
            return self._owners.optimizer_state(self._updates)
        return optimizers.read_state(self.optimizers[0] if self.optimizers else None, self.setup.optimizer,
                                     dict(self.models[0].named_parameters()), self.spec.trainable(), self._updates)

    def load_optimizer_state(self, state: State) -> None:
        """Canonical state into every replica's torch optimizer (none: only the update count)."""
        self._updates = int(state[STEP])
        if self._fsdp is not None:
            self._fsdp.load_optimizer_state(state)
        if self._owners is not None:
            self._owners.load_optimizer_state(state)
        for opt, model in zip(self.optimizers, self.models):
            optimizers.write_state(opt, self.setup.optimizer, dict(model.named_parameters()), state)

    def _eval_logits(self, batch: Batch) -> list[torch.Tensor]:
        """Inference-mode logits of the non-empty shards, under the training's precision, in the parameters' dtype."""
        with torch.no_grad(), self._flags(), self._whole():  # under FSDP2 every process gathers, rows or none
            out = []
            for i, (model, shard) in enumerate(zip(self.models, batch)):
                model.eval()
                if shard.size:
                    out.append(self._forward(i, shard.x).to(self.dtype))
            return out

    def evaluate(self, batch: Batch) -> StepStats:
        active = [s for s in batch if s.size]
        pairs = list(zip(self._eval_logits(batch), active))
        return self._to_host([F.cross_entropy(logits, shard.y, reduction="sum") for logits, shard in pairs],
                             [(logits.argmax(1) == shard.y).sum() for logits, shard in pairs],
                             sum(shard.size for shard in active)).result()

    def predict(self, batch: Batch) -> np.ndarray:
        parts = [logits.cpu().numpy() for logits in self._eval_logits(batch)]
        return predictions(parts, self.spec.num_classes, self.setup.np_dtype)

    def _whole(self) -> ContextManager[None]:
        """The whole parameters for a pass that does not update (a sharded run's gathered, released after)."""
        if self._fsdp is not None:
            return self._fsdp.whole()
        return self._owners.gathered() if self._owners is not None else contextlib.nullcontext()

    def replica_state(self, device: int) -> State:
        if self._fsdp is not None:
            return self._fsdp.state()
        with self._whole():
            return {k: v.detach().cpu().numpy().copy() for k, v in self.models[device].state_dict().items()}

    def load_state(self, state: State) -> None:
        self.spec.check(state)
        sharded = getattr(self, "_fsdp", None)  # made after the first load
        if sharded is not None:
            sharded.load(state)
            return
        owners = getattr(self, "_owners", None)
        if owners is not None:
            owners.gather()
        for model in self.models:
            model.load_state_dict({k: torch.from_numpy(np.array(v)).to(self.dtype) for k, v in state.items()})
        if owners is not None:
            owners.load(state)

    def held_bytes(self) -> list[dict[str, int]]:
        """Each device's bytes of parameters and optimizer state between updates (contract: Sharding)."""
        if self._fsdp is not None:
            return self._fsdp.held_bytes()
        if self._owners is not None:
            return self._owners.held_bytes()
        return [{"parameters": sum(p.nbytes for p in model.parameters()),
                 "optimizer": optimizers.state_bytes(opt)}
                for model, opt in zip(self.models, self.optimizers or [None] * len(self.models))]
