"""A training recipe: optimizer, learning-rate schedule, accumulation and precision, as one value.

``Settings`` makes it from its flat fields (``optimizer``, ``momentum``,
..., ``tf32``); engines see it in their ``Setup``, and it goes into the
JSON result and the checkpoint, so a run can be repeated, resumed and
compared with its recipe whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from multidev.rules.optimizers import Optimizer
from multidev.rules.precision import check_accumulate, check_precision
from multidev.rules.schedules import Schedule


@dataclass(frozen=True)
class Recipe:
    optimizer: Optimizer = field(default_factory=Optimizer)
    schedule: Schedule = field(default_factory=Schedule)
    #: micro-batches per update: each of ``batch_size`` rows, one update of ``accumulate * batch_size``
    accumulate: int = 1
    precision: str = "fp32"
    tf32: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "accumulate", check_accumulate(self.accumulate))
        check_precision(self.precision)

    def settings(self) -> dict[str, Any]:
        """For JSON results and checkpoints."""
        return {"optimizer": self.optimizer.settings(), "schedule": self.schedule.settings(),
                "accumulate": self.accumulate, "precision": self.precision, "tf32": self.tf32}

    @classmethod
    def from_settings(cls, settings: Optional[Mapping[str, Any]]) -> "Recipe":
        """The recipe a checkpoint or result names; the book's plain SGD for ones written before recipes."""
        settings = dict(settings or {})
        return cls(Optimizer.from_settings(settings.get("optimizer")), Schedule.from_settings(settings.get("schedule")),
                   int(settings.get("accumulate", 1)), settings.get("precision", "fp32"),
                   bool(settings.get("tf32", False)))

    def label(self) -> str:
        """A short name for tables and plots; empty for the book's plain SGD."""
        o, parts = self.optimizer, []
        if not o.plain or o.name != "sgd":
            parts.append(o.name + (f" m{o.momentum:g}" if o.momentum else "") + (" nesterov" if o.nesterov else "")
                         + (f" wd{o.weight_decay:g}" if o.weight_decay else ""))
        if self.schedule.kind != "constant" or self.schedule.warmup(1):
            parts.append(self.schedule.kind + (" +warm-up" if self.schedule.warmup(1) else ""))
        parts += [f"accumulate {self.accumulate}"] if self.accumulate > 1 else []
        parts += [self.precision] if self.precision != "fp32" else []
        return ", ".join(parts)

    def at_float64(self) -> "Recipe":
        """The same recipe for a float64 truth run: computed in float64 throughout."""
        return replace(self, precision="fp32", tf32=False)
