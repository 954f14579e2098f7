"""Sharded data parallelism in one process's replicas: each device keeps its rows (contract: Sharding).

ZeRO's three stages, the engine's own, on the core's rule (``Setup.owned``:
PyTorch's ``Shard(0)`` rows of each parameter, device by device over the job):

- ``optimizer``: device i's ``torch.optim`` optimizer holds only its rows
  (views of nothing: parameters of their own, ``owned``), steps them with
  its rows of the all-reduced gradient, and every replica copies the rows
  back from their owners (the all-gather).
- ``gradients``: the gradient is reduce-scattered instead: each owner adds
  its rows of every replica's gradient in the all-reduce's order (so the same
  bits), and the replicas' whole gradients are freed.
- ``parameters``: the replicas' parameters are freed after each update too
  (storage of size 0) and gathered from the owners when a step needs them.

Across processes the gradients cross through the replicated run's
all-reduce (the same additions, then each device keeps its rows); the
parameters and the state through shared memory where the job is on one
machine (``multidev.processes.rowgather``: each process writes its rows,
then reads the others'), else as a sum of zeros and each owner's rows
(exact: x + 0 is x). Running statistics stay whole.

A CPU job of one device per process at ``gradients`` or ``parameters`` is not
sharded here but by PyTorch's own FSDP2 (:mod:`.fsdp`); these owners keep one
process with several devices, several devices per process, the level
``optimizer`` (FSDP2 has no ZeRO-1), GPUs, NHWC kernels and scalar parameters.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cached_property
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import torch

from multidev.engine import STEP, HostSum, RowGather, Setup, State, sharded_parts, slot_name

from .distributed import all_sum_tensors
from .optimizers import SLOTS, Update, state_bytes


class Owners:
    """Every local device's rows of each parameter, with the optimizer that updates them."""

    def __init__(self, setup: Setup, models: Sequence[torch.nn.Module], layout: torch.memory_format,
                 shared_sum: Callable[[], Optional[HostSum]]) -> None:
        self.setup, self.models, self.layout, self.shared_sum = setup, list(models), layout, shared_sum
        self.parts = sharded_parts(setup.shard)
        self.places = [next(m.parameters()).device for m in self.models]
        first = dict(self.models[0].named_parameters())
        self.shapes = {name: tuple(p.shape) for name, p in first.items()}
        self.dtype = next(iter(first.values())).dtype
        #: name -> this process's devices' [start, end) rows (a scalar: the whole, on every device)
        self.rows = {name: setup.owned(shape[0]) if shape else [(0, 0)] * len(self.models)
                     for name, shape in self.shapes.items()}
        #: below ``parameters`` the owners' rows are views of their replica's parameters, updated in place
        self.views = not self.parts["parameters"]
        self.owned: list[dict[str, torch.nn.Parameter]] = [
            {name: torch.nn.Parameter(self._rows(p.detach(), a, b)) for (name, p) in m.named_parameters()
             for a, b in [self.rows[name][i]] if b > a or not p.dim()}
            for i, m in enumerate(self.models)]
        self.optimizers = [Update(setup.optimizer, own.values()) if own else None for own in self.owned]
        self.whole = True  # the replicas hold their whole parameters
        self.release()

    def _rows(self, p: torch.Tensor, a: int, b: int) -> torch.Tensor:
        rows = p[a:b] if p.dim() else p
        return rows if self.views else rows.clone()

    # Parameters --------------------------------------------------------------------------------------------
    def load(self, state: State) -> None:
        """Canonical parameters, which every replica has just loaded whole, into the owners' rows."""
        if self.views:  # the replicas' rows, loaded whole
            return
        with torch.no_grad():
            for i, own in enumerate(self.owned):
                for name, p in own.items():
                    a, b = self.rows[name][i]
                    value = torch.from_numpy(np.array(state[name]))
                    p.data.copy_((value[a:b] if p.dim() else value).to(p.device, self.dtype))
        self.whole = True
        self.release()

    def _assembled(self, parts: Callable[[int, str], torch.Tensor]) -> dict[str, torch.Tensor]:
        """Whole arrays from the owners' rows (``parts(i, name)``), on the first device; over the processes,
        through shared memory, or a sum of each process's rows and zeros."""
        gather = self._shared
        if gather is not None:
            return self._gathered(gather, parts)
        out = {}
        for name, shape in self.shapes.items():
            if not shape:
                out[name] = parts(0, name).to(self.places[0])
                continue
            whole = torch.zeros(shape, dtype=self.dtype, device=self.places[0])
            for i, (a, b) in enumerate(self.rows[name]):
                if b > a:
                    whole[a:b] = parts(i, name).to(self.places[0])
            out[name] = whole
        if self.setup.group.size > 1:
            names = [n for n in out if self.shapes[n]]
            for name, total in zip(names, all_sum_tensors([out[n] for n in names])):
                out[name] = total
        return out

    @cached_property
    def _shared(self) -> Optional[RowGather]:
        """The gather through the gradient sum's shared memory (opened by every rank at its first gather if no sum
        has yet, a collective); None in one process, or where the job sums otherwise."""
        if self.setup.group.size == 1:
            return None
        host = self.shared_sum()
        return host and RowGather(host, list(self.shapes.values()), len(self.models))

    def _gathered(self, gather: RowGather, parts: Callable[[int, str], torch.Tensor]) -> dict[str, torch.Tensor]:
        """``_assembled`` through shared memory: this process's rows written into the sum's total, every array
        read whole from it (views: copy before the next sum or gather)."""
        gather.start()
        flat, names = torch.from_numpy(gather.array()), list(self.shapes)
        for j, i, lo, hi in gather.mine():
            flat[lo:hi].copy_(parts(i, names[j]).reshape(-1))
        gather.finish()
        return {name: torch.from_numpy(gather.whole(j)).to(self.places[0]) for j, name in enumerate(self.shapes)}

    def gather(self) -> None:
        """Every replica's whole parameters from their owners (the all-gather): below ``parameters`` each replica
        copies the other owners' rows into its own, else its parameters are made again from the rows."""
        if self.whole:
            return
        with torch.no_grad():
            if self.views and self.setup.group.size == 1:
                self._copy_rows()
            else:
                wholes = self._assembled(lambda i, name: self.owned[i][name].detach())
                for model, place in zip(self.models, self.places):
                    for name, p in model.named_parameters():
                        if self.views:
                            p.data.copy_(wholes[name])
                            continue
                        form = self.layout if p.dim() == 4 else torch.contiguous_format
                        p.data = wholes[name].to(place, copy=True).contiguous(memory_format=form)
        self.whole = True

    def _copy_rows(self) -> None:
        """Each owner's rows into every other replica of this process."""
        for j, model in enumerate(self.models):
            for name, p in model.named_parameters():
                for i, own in enumerate(self.owned):
                    if i != j and name in own:
                        a, b = self.rows[name][i]
                        (p.data[a:b] if p.dim() else p.data).copy_(own[name].detach())

    def release(self) -> None:
        """At ``parameters``, the replicas' whole parameters freed: the owners' rows are the model until the next
        gather."""
        if self.views:
            return
        for model, place in zip(self.models, self.places):
            for p in model.parameters():
                p.data = torch.empty(0, dtype=self.dtype, device=place)
        self.whole = False

    @contextmanager
    def gathered(self) -> Iterator[None]:
        """The whole parameters for a pass that is not an update (evaluation, a state read), released after."""
        self.gather()
        try:
            yield
        finally:
            self.release()

    # The step ----------------------------------------------------------------------------------------------
    def scatter(self, summed: bool) -> None:
        """Each owner's rows of the gradient: of the all-reduced one (``summed``), or added up from every replica's
        in the all-reduce's order (the reduce-scatter), the replicas' whole gradients then freed."""
        params = [dict(m.named_parameters()) for m in self.models]
        for i, own in enumerate(self.owned):
            for name, p in own.items():
                a, b = self.rows[name][i]
                grads = [ps[name].grad for ps in params if ps[name].grad is not None]
                rows = (lambda g: g[a:b]) if p.dim() else (lambda g: g)
                if summed or len(grads) == 1:
                    p.grad = rows(params[i][name].grad if summed else grads[0]).to(p.device, copy=True)
                    continue
                total = rows(grads[0]).to(p.device, copy=True)
                for g in grads[1:]:
                    total.add_(rows(g).to(p.device))
                p.grad = total
        if self.parts["gradients"]:
            for model in self.models:
                model.zero_grad(set_to_none=True)

    def step(self, lr: float) -> None:
        """Each owner updates its rows; the replicas take them back (at ``parameters``, at the next gather)."""
        for opt in self.optimizers:
            if opt is not None:
                opt.step(lr)
        if self.views:
            self.whole = False
            self.gather()
        else:
            self.release()

    # Optimizer state and memory ----------------------------------------------------------------------------
    def optimizer_state(self, updates: int) -> State:
        """The whole optimizer state in canonical names, gathered from its owners."""
        state: State = {STEP: np.array(updates, np.int64)}
        names = self.setup.spec.trainable()
        for slot in self.setup.optimizer.slots:
            def held(i: int, name: str, slot: str = slot) -> torch.Tensor:
                own = self.owned[i].get(name)
                value = None if own is None else self.optimizers[i].state.get(own, {}).get(SLOTS[slot])
                return torch.zeros_like(own) if value is None else value
            for name, value in self._assembled(held).items():
                if name in names:
                    state[slot_name(slot, name)] = value.detach().cpu().numpy().copy()
        return state

    def load_optimizer_state(self, state: State) -> None:
        """Each owner's rows of the canonical state into its optimizer."""
        updates = int(state[STEP])
        for i, (own, opt) in enumerate(zip(self.owned, self.optimizers)):
            for name, p in own.items():
                a, b = self.rows[name][i]
                held = {}
                for slot in self.setup.optimizer.slots:
                    value = torch.from_numpy(np.array(state[slot_name(slot, name)]))
                    held[SLOTS[slot]] = (value[a:b] if p.dim() else value).to(p.device, self.dtype).clone()
                if self.setup.optimizer.name == "adamw":
                    held["step"] = torch.tensor(float(updates))
                opt.state[p] = held

    def held_bytes(self) -> list[dict[str, int]]:
        """What each device holds between updates: the replica's parameters (or its rows alone), the owner's
        optimizer state."""
        out = []
        for i, (model, opt) in enumerate(zip(self.models, self.optimizers)):
            params = sum(p.nbytes for p in model.parameters()) if self.views else \
                sum(p.nbytes for p in self.owned[i].values()) + sum(p.nbytes for p in model.parameters())
            out.append({"parameters": int(params), "optimizer": state_bytes(opt)})
        return out
