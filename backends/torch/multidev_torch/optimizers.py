"""The core's optimizers (multidev.rules.optimizers) as ``torch.optim``'s, and their state in canonical names.

torch's built-ins are the contract's definitions once every setting is
explicit: ``SGD`` adds the decay to the gradient and starts its buffer at the
first gradient (a zero buffer's update), ``AdamW`` decays apart from the
gradient (and would decay 0.01 by default). Each replica holds its own
optimizer; they see the same summed gradient and step alike, so device 0's
state is every device's.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional

import numpy as np
import torch

from multidev.engine import STEP, Optimizer, State, slot_name

#: canonical slot -> the key torch's optimizers keep it under (AdamW's own per-parameter "step" is the count)
SLOTS = {"momentum": "momentum_buffer", "m": "exp_avg", "v": "exp_avg_sq"}


def torch_optimizer(optimizer: Optimizer, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """torch's own optimizer for ``optimizer``, every setting explicit; the rate is set on every step."""
    if optimizer.name == "adamw":
        return torch.optim.AdamW(params, lr=0.0, betas=optimizer.betas, eps=optimizer.eps,
                                 weight_decay=optimizer.weight_decay, amsgrad=False)
    return torch.optim.SGD(params, lr=0.0, momentum=optimizer.momentum, dampening=0.0, nesterov=optimizer.nesterov,
                           weight_decay=optimizer.weight_decay)


def state_bytes(opt: Optional[torch.optim.Optimizer],
                local: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> int:
    """Bytes of the slot tensors ``opt`` holds (``local``: of this process's shard of each), its counts left out:
    what a device keeps of the optimizer state (contract: Sharding)."""
    if opt is None:
        return 0
    return int(sum(local(v).nbytes for s in opt.state.values() for k, v in s.items()
                   if k != "step" and isinstance(v, torch.Tensor)))


def read_state(opt: Optional[torch.optim.Optimizer], optimizer: Optimizer, params: Mapping[str, torch.nn.Parameter],
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


def write_state(opt: torch.optim.Optimizer, optimizer: Optimizer, params: Mapping[str, torch.nn.Parameter],
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
