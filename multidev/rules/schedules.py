"""Learning-rate schedules, computed by the core (contract: Learning-rate schedules).

The rate of every update is a function of the update's number alone, so a
resumed run, another engine and another process count all get the same
rates, and engines only ever receive a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from multidev.errors import MultidevError
from multidev.rules.numbers import whole_number

SCHEDULES = ("constant", "step", "cosine")


@dataclass(frozen=True)
class Schedule:
    """Which schedule, with an optional linear warm-up in updates (``warmup_steps``) or epochs.

    ``step``: the rate is multiplied by ``factor`` after each epoch in
    ``milestones``. ``cosine``: from the base rate down towards 0 over the
    updates after the warm-up. Warm-up: update s <= W runs at lr * s / W.
    """

    kind: str = "constant"
    milestones: tuple[int, ...] = ()
    factor: float = 0.1
    warmup_steps: int = 0
    warmup_epochs: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise MultidevError(f"unknown schedule {self.kind!r}: choose one of {', '.join(SCHEDULES)}")
        milestones = tuple(self.milestones)
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in milestones):
            raise MultidevError(f"milestones must be epochs of at least 1, got {list(self.milestones)}")
        if milestones and self.kind != "step":
            raise MultidevError("milestones belong to --schedule step: add it or drop --milestones")
        if self.kind == "step" and not milestones:
            raise MultidevError("--schedule step needs --milestones, the epochs after which the rate drops, e.g. 5,8")
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) \
                or not 0 < self.factor <= 1 or not math.isfinite(self.factor):
            raise MultidevError(f"the schedule's factor must be in (0, 1], got {self.factor!r}")
        object.__setattr__(self, "warmup_steps", whole_number(self.warmup_steps, "warm-up steps", minimum=0))
        if isinstance(self.warmup_epochs, bool) or not isinstance(self.warmup_epochs, (int, float)) \
                or not math.isfinite(self.warmup_epochs) or self.warmup_epochs < 0:
            raise MultidevError(f"warm-up epochs must be 0 or more, got {self.warmup_epochs!r}")
        if self.warmup_steps and self.warmup_epochs:
            raise MultidevError("give the warm-up in steps or in epochs, not both")
        object.__setattr__(self, "milestones", tuple(sorted(milestones)))
        object.__setattr__(self, "warmup_epochs", float(self.warmup_epochs))

    def warmup(self, steps_per_epoch: int) -> int:
        """Warm-up length in updates."""
        return self.warmup_steps or int(round(self.warmup_epochs * steps_per_epoch))

    def check(self, steps_per_epoch: int, epochs: int) -> None:
        """One line when the warm-up does not leave the run an update at the full rate."""
        total, warm = steps_per_epoch * epochs, self.warmup(steps_per_epoch)
        if warm >= total:
            raise _too_long(f"{warm} steps", f"{total} steps of {epochs} epochs")

    def check_epochs(self, epochs: int) -> None:
        """The check a launcher can make before it knows the data set: a warm-up in epochs against the epochs."""
        if self.warmup_epochs >= epochs:
            raise _too_long(f"{self.warmup_epochs:g} epochs", f"{epochs} epochs")

    def rate(self, lr: float, step: int, steps_per_epoch: int, epochs: int) -> float:
        """The learning rate of update ``step`` (1-based, counted over the whole run)."""
        warm = self.warmup(steps_per_epoch)
        if step <= warm:
            return lr * step / warm
        if self.kind == "step":
            epoch = -(-step // steps_per_epoch)
            return lr * self.factor ** sum(epoch > m for m in self.milestones)
        if self.kind == "cosine":
            span = steps_per_epoch * epochs - warm
            return lr * 0.5 * (1 + math.cos(math.pi * (step - warm - 1) / span))
        return lr

    def rates(self, lr: float, steps_per_epoch: int, epochs: int) -> list[float]:
        """Every update's rate, in order."""
        return [self.rate(lr, s, steps_per_epoch, epochs) for s in range(1, steps_per_epoch * epochs + 1)]

    def settings(self) -> dict:
        return {"kind": self.kind, "milestones": list(self.milestones), "factor": self.factor,
                "warmup_steps": self.warmup_steps, "warmup_epochs": self.warmup_epochs}

    @classmethod
    def from_settings(cls, settings: dict | None) -> "Schedule":
        settings = dict(settings or {})
        settings["milestones"] = tuple(settings.get("milestones", ()))
        return cls(**settings)


def parse_milestones(text: str | Sequence[int]) -> tuple[int, ...]:
    if isinstance(text, int) and not isinstance(text, bool):
        return (text,)  # one milestone, given as a number
    if not isinstance(text, str):
        try:
            return tuple(text)
        except TypeError:
            raise MultidevError(f"milestones must be epochs, e.g. (5, 8) or '5,8'; got {text!r}") from None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise MultidevError(f"milestones must be epochs separated by commas, e.g. 5,8; got {text!r}") from None


def _too_long(warmup: str, run: str) -> MultidevError:
    """The one line for a warm-up that leaves no update at the full rate, in steps or in epochs."""
    return MultidevError(f"the warm-up ({warmup}) is as long as the run or longer ({run}): shorten the warm-up or "
                         "raise --epochs")
