"""The core's optimizers (multidev.rules.optimizers) as ``torch.optim``'s, and their state in canonical names.

torch's built-ins are the contract's definitions once every setting is
explicit: ``SGD`` adds the decay to the gradient and starts its buffer at the
first gradient (a zero buffer's update), ``AdamW`` decays apart from the
gradient (and would decay 0.01 by default). Each replica holds its own
optimizer; they see the same summed gradient and step alike, so device 0's
state is every device's.

The engine calls them in ``torch.optim``'s functional form (:class:`Update`):
the same functions, defaults and state, without the ``Optimizer`` class,
whose every ``step`` imports ``torch._dynamo`` first (1.0-1.7 s of a run's
first step on these CPUs, for a compiler an eager step never uses).
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional

import numpy as np
import torch
from torch.optim.adam import adam
from torch.optim.sgd import sgd

from multidev.engine import STEP, Optimizer, State, slot_name

#: canonical slot -> the key torch's optimizers keep it under (AdamW's own per-parameter "step" is the count)
SLOTS = {"momentum": "momentum_buffer", "m": "exp_avg", "v": "exp_avg_sq"}


class Update:
    """``torch.optim.SGD`` or ``AdamW``'s step over ``params`` through the functions their ``step`` calls
    (``torch.optim.sgd.sgd``, ``torch.optim.adam.adam`` decoupled), each parameter's state made and kept under the
    same keys as theirs (:data:`SLOTS`, AdamW's ``step``), so the same bits follow and the state reads alike."""

    def __init__(self, optimizer: Optimizer, params: Iterable[torch.nn.Parameter]) -> None:
        self.optimizer = optimizer
        self.params = list(params)
        self.state: dict[torch.nn.Parameter, dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def step(self, lr: float) -> None:
        """One update at rate ``lr`` of every parameter with a gradient (torch's defaults: foreach where
        supported)."""
        live = [p for p in self.params if p.grad is not None]
        grads = [p.grad for p in live]
        held = [self.state.setdefault(p, {}) for p in live]
        o = self.optimizer
        if o.name == "adamw":
            for p, s in zip(live, held):
                if not s:  # as torch's AdamW starts a parameter: a CPU count in the default dtype, zero moments
                    s.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p, memory_format=torch.preserve_format),
                             exp_avg_sq=torch.zeros_like(p, memory_format=torch.preserve_format))
            adam(live, grads, [s["exp_avg"] for s in held], [s["exp_avg_sq"] for s in held], [],
                 [s["step"] for s in held], has_complex=any(torch.is_complex(p) for p in live),
                 decoupled_weight_decay=True, amsgrad=False, beta1=o.betas[0], beta2=o.betas[1], lr=lr,
                 weight_decay=o.weight_decay, eps=o.eps, maximize=False)
            return
        buffers = [s.get(SLOTS["momentum"]) for s in held] if o.momentum else []
        sgd(live, grads, buffers, weight_decay=o.weight_decay, momentum=o.momentum, lr=lr, dampening=0.0,
            nesterov=o.nesterov, maximize=False, has_sparse_grad=False)
        for s, buffer in zip(held, buffers):  # sgd made each buffer at its first gradient
            s[SLOTS["momentum"]] = buffer

    def zero_grad(self) -> None:
        """Every parameter's gradient dropped (``set_to_none``, as ``torch.optim``'s default)."""
        for p in self.params:
            p.grad = None


def state_bytes(opt: Optional[Update],
                local: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> int:
    """Bytes of the slot tensors ``opt`` holds (``local``: of this process's shard of each), its counts left out:
    what a device keeps of the optimizer state (contract: Sharding)."""
    if opt is None:
        return 0
    return int(sum(local(v).nbytes for s in opt.state.values() for k, v in s.items()
                   if k != "step" and isinstance(v, torch.Tensor)))


def read_state(opt: Optional[Update], optimizer: Optimizer, params: Mapping[str, torch.nn.Parameter],
               names: list[str], updates: int) -> State:
    """``opt``'s state under canonical names; zeros for a slot torch has not made yet (no ``opt``: a model with
    nothing to train, whose state is the update count alone)."""
    state: State = {STEP: np.array(updates, np.int64)}
    for slot in optimizer.slots:
        for name in names:
            held = None if opt is None else opt.state.get(params[name], {}).get(SLOTS[slot])
            value = torch.zeros_like(params[name]) if held is None else held
            state[slot_name(slot, name)] = value.detach().cpu().numpy().copy()
    return state


def write_state(opt: Update, optimizer: Optimizer, params: Mapping[str, torch.nn.Parameter],
                state: State) -> int:
    """Canonical ``state`` into ``opt``, on each parameter's device; returns the update count it resumes from.

    AdamW's per-parameter count is the update count.
    """
    updates = int(state[STEP])
    for name, p in params.items():
        # empty_like: each slot in its parameter's device, dtype and memory layout (NHWC on a GPU: multidev_torch.gpu)
        held = {SLOTS[slot]: torch.empty_like(p).copy_(torch.from_numpy(np.array(state[slot_name(slot, name)])))
                for slot in optimizer.slots}
        if optimizer.name == "adamw":
            held["step"] = torch.tensor(float(updates))  # as torch makes it: on the CPU, default dtype
        opt.state[p] = held
    return updates
