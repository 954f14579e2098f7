"""How far two runs' parameters part over training: rounding, or a different definition?

A run started with ``trace=FOLDER`` saves its trainable parameters after the
first steps (:data:`TRACE_STEPS`) and after every epoch. ``multidev compare``
runs the same job once more in float64 (the truth) and measures every float32
run's distance from it at each saved step. Float32 rounding alone moves a run
away from the truth, and training amplifies it; an engine that defines
something differently moves further, from the first steps on. The first
engine's float32 run sets the scale of rounding for the others.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from multidev.outputs.trace import _file, steps
from multidev.rules.models import State

#: float32 implementations differ in rounding by up to ~10x (measured: MXNet's convolutions against
#: torch's, 7x); a different definition (a momentum, an unbiased variance) moves parameters by 1e-3 or
#: more within a few steps. A ReLU input flipped by rounding moves them as much: float64 runs tell.
FACTOR = 100.0


#: A float64 run within this of the float64 truth defines everything the same: far below float32's 6e-8 per
#: operation amplified by training, far above float64's 1e-14 (MXNet's SGD takes lr as a 32-bit float: 2.6e-8).
SAME_DEFINITION = 1e-6


#: an array is measured against its largest magnitude, but never one below this share of the model's largest
FLOOR = 1e-3


def distance(a: State, b: State) -> tuple[float, float]:
    """(largest, median) over arrays of max |a - b| / the array's largest magnitude.

    An array far smaller than the model's largest is measured against
    ``FLOOR`` times that instead: a convolution's bias before BatchNorm has a
    gradient of zero, so its value is rounding alone (1e-9 in float32, 1e-17
    in float64), and against its own size every run would part by 100%.
    """
    pairs = {name: (np.asarray(value, np.float64), np.asarray(b[name], np.float64)) for name, value in a.items()}
    largest = {name: max(float(np.abs(x).max(initial=0.0)), float(np.abs(y).max(initial=0.0)))
               for name, (x, y) in pairs.items()}
    floor = max(FLOOR * max(largest.values(), default=0.0), 1e-30)
    errors = [float(np.abs(x - y).max(initial=0.0)) / max(largest[name], floor) for name, (x, y) in pairs.items()]
    return max(errors), float(np.median(errors))


@dataclass
class Divergence:
    """A run's distance from the truth run (labelled ``truth``) at each traced step."""

    truth: str
    steps: list[int] = field(default_factory=list)
    max: list[float] = field(default_factory=list)
    median: list[float] = field(default_factory=list)

    def at(self, step: int) -> Optional[float]:
        return self.max[self.steps.index(step)] if step in self.steps else None

    def to_dict(self) -> dict:
        return asdict(self)


def measure(truth: Path, run: Path, label: str) -> Divergence:
    """Distance of ``run``'s trace from ``truth``'s at every step both saved."""
    out = Divergence(label)
    shared = sorted(set(steps(truth)) & set(steps(run)))
    for step in shared:
        with np.load(_file(truth, step)) as t, np.load(_file(run, step)) as r:
            largest, middle = distance(dict(r), dict(t))
        out.steps.append(step)
        out.max.append(largest)
        out.median.append(middle)
    return out


def first_step_beyond(run: Divergence, limit: Callable[[int], Optional[float]]) -> Optional[int]:
    """The first traced step where ``run`` exceeds ``limit(step)`` (None: it never does)."""
    for step, value in zip(run.steps, run.max):
        bound = limit(step)
        if bound is not None and value > bound:
            return step
    return None


def same_definition(run: Divergence) -> bool:
    """Whether a float64 run stays on the float64 truth at every step."""
    return first_step_beyond(run, lambda step: SAME_DEFINITION) is None


def describe_float64(run: Divergence) -> str:
    step = first_step_beyond(run, lambda step: SAME_DEFINITION)
    if step is None:
        return f"same definition (float64 within {max(run.max, default=0.0):.0e})"
    return f"different definition (step {step}: {run.at(step):.1e})"


def describe_float32(run: Divergence, scale: Divergence, engine: str, float64: Optional[Divergence],
                     float64_possible: bool) -> str:
    """'rounding' where ``run`` stays within :data:`FACTOR` of the float32 scale at every step; otherwise
    what the same engine's float64 run (if there is one) says about why."""
    step = first_step_beyond(run, lambda s: None if scale.at(s) is None else FACTOR * max(scale.at(s), 1e-12))
    if step is None:
        return "rounding"
    beyond = f"beyond rounding from step {step} ({run.at(step):.1e} vs {scale.at(step):.1e})"
    if float64 is None:
        tell = "--float64 tells" if float64_possible else f"{engine} has no float64 to tell"
        return f"{beyond}: a flipped ReLU or another definition ({tell})"
    if same_definition(float64):
        return f"rounding: float64 agrees, so a ReLU flipped by step {step}"
    return f"{beyond}; float64 too: another definition"
