"""The optimizers every engine offers, one definition each (contract: Optimizers), and their NumPy formula.

The frameworks disagree on details (torch and Gluon add weight decay to the
gradient, optax leaves it to the user; Gluon keeps the learning rate inside
its momentum buffer; Adam's epsilon sits inside or outside the bias
correction). The core picks one definition per optimizer, here, and every
engine reaches it through its framework's own optimizers. :func:`update` is
that definition written out in NumPy: the conformance kit holds engines to it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from multidev.errors import MultidevError
from multidev.rules.models import ModelSpec, State

OPTIMIZERS = ("sgd", "adamw")


#: canonical names of optimizer state: STATE_PREFIX + slot + "." + parameter name, and the update count
STATE_PREFIX = "optimizer."


STEP = "optimizer.step"


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value):
        raise MultidevError(f"{what} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Optimizer:
    """Which optimizer and its settings; checked when made, so engines never validate them.

    ``sgd``: g = grad + weight_decay * w (coupled, L2); b = momentum * b + g
    (b starts at 0); d = g + momentum * b with ``nesterov``, else b; w -= lr * d.
    ``adamw``: decoupled decay, w -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * w).
    Every parameter is decayed (weights, biases, BatchNorm's scale and shift).
    """

    name: str = "sgd"
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise MultidevError(f"unknown optimizer {self.name!r}: choose one of {', '.join(OPTIMIZERS)}")
        momentum = _number(self.momentum, "momentum")
        if not 0.0 <= momentum < 1.0:
            raise MultidevError(f"momentum must be in [0, 1), got {self.momentum!r}")
        decay = _number(self.weight_decay, "weight decay")
        if decay < 0:
            raise MultidevError(f"weight decay must be 0 or more, got {self.weight_decay!r}")
        betas = tuple(self.betas)
        if len(betas) != 2 or not all(0.0 <= _number(b, "adamw beta") < 1.0 for b in betas):
            raise MultidevError(f"adamw betas must be two numbers in [0, 1), got {self.betas!r}")
        if _number(self.eps, "adamw eps") <= 0:
            raise MultidevError(f"adamw eps must be above 0, got {self.eps!r}")
        if self.name == "adamw" and (momentum or self.nesterov):
            raise MultidevError("momentum and nesterov belong to sgd: adamw's momentum is its first beta (--betas)")
        if self.nesterov and momentum == 0:
            raise MultidevError("nesterov needs momentum above 0: add --momentum, e.g. 0.9")
        object.__setattr__(self, "momentum", momentum)
        object.__setattr__(self, "weight_decay", decay)
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))
        object.__setattr__(self, "eps", float(self.eps))
        object.__setattr__(self, "nesterov", bool(self.nesterov))

    @property
    def plain(self) -> bool:
        """Plain SGD at a given rate: what every engine offers, with no state to carry."""
        return self.name == "sgd" and self.momentum == 0 and self.weight_decay == 0

    @property
    def slots(self) -> tuple[str, ...]:
        """The per-parameter state this optimizer keeps, in canonical slot names."""
        if self.name == "adamw":
            return ("m", "v")
        return ("momentum",) if self.momentum else ()

    def state_names(self, spec: ModelSpec) -> list[str]:
        """Every canonical name of the optimizer's state for ``spec``: the update count, then each slot."""
        return [STEP] + [slot_name(slot, p) for slot in self.slots for p in spec.trainable()]

    def init_state(self, spec: ModelSpec, dtype: Any = np.float64) -> State:
        """The state before the first update: zeros, and a count of 0."""
        shapes = {p.name: p.shape for p in spec.params()}
        state: State = {STEP: np.array(0, np.int64)}
        for slot in self.slots:
            for p in spec.trainable():
                state[slot_name(slot, p)] = np.zeros(shapes[p], dtype)
        return state

    def settings(self) -> dict[str, Any]:
        """What the JSON result and the checkpoint record: only the settings this optimizer uses."""
        out = asdict(self)
        out["betas"] = list(self.betas)
        if self.name == "sgd":
            del out["betas"], out["eps"]
        else:
            del out["momentum"], out["nesterov"]
        return out

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> "Optimizer":
        """The optimizer a checkpoint names (plain SGD for checkpoints that name none)."""
        settings = dict(settings or {})
        if "betas" in settings:
            settings["betas"] = tuple(settings["betas"])
        return cls(**settings)


def slot_name(slot: str, param: str) -> str:
    return f"{STATE_PREFIX}{slot}.{param}"


def check_state(optimizer: Optimizer, spec: ModelSpec, state: Mapping[str, np.ndarray]) -> None:
    """One line when ``state`` is not a whole optimizer state of ``optimizer`` for ``spec``."""
    missing = [name for name in optimizer.state_names(spec) if name not in state]
    if missing:
        raise MultidevError(f"the optimizer state lacks {missing[0]} ({len(missing)} missing): resume with the "
                            f"optimizer settings the checkpoint was written with")


def update(optimizer: Optimizer, params: State, grads: State, state: State, lr: float) -> tuple[State, State]:
    """(new parameters, new state) after one update: the contract's definition, in the arrays' dtype.

    ``params`` and ``grads`` hold the trainable parameters; the update works
    on every name in ``grads``.
    """
    step = int(state[STEP]) + 1
    new_params, new_state = {}, {STEP: np.array(step, np.int64)}
    decay, opt = optimizer.weight_decay, optimizer
    for name, grad in grads.items():
        w = params[name]
        if opt.name == "sgd":
            g = grad + decay * w
            if opt.momentum:
                buf = opt.momentum * state[slot_name("momentum", name)] + g
                new_state[slot_name("momentum", name)] = buf
                g = g + opt.momentum * buf if opt.nesterov else buf
            new_params[name] = w - lr * g
        else:
            b1, b2 = opt.betas
            m = b1 * state[slot_name("m", name)] + (1 - b1) * grad
            v = b2 * state[slot_name("v", name)] + (1 - b2) * grad * grad
            new_state[slot_name("m", name)], new_state[slot_name("v", name)] = m, v
            m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)
            new_params[name] = w - lr * (m_hat / (np.sqrt(v_hat) + opt.eps) + decay * w)
    return new_params, new_state
