"""How far a run's state parts from the float64 truth over training, and where the difference is born.

A run started with ``trace=FOLDER`` saves its parameters and running statistics at its start (step 0),
after the first steps (:data:`TRACE_STEPS`) and after every epoch. ``multidev compare`` runs the job once
more in float64 (the truth) and measures every run against it at each saved step, array by array.

Rounding alone keeps a run within *reach* of the truth: float32 gradients lie within
:data:`GRADIENT_SHARE` of float64's where no ReLU sits at its kink (the contract's ``SAME_ENGINE_RTOL``), so
rounding moves an array by at most that share of the way the truth moved it, plus what storing it rounds.
A difference is *born* at the first step and array where a run leaves its reach: a ReLU that rounding
flipped, a BatchNorm channel whose variance is within epsilon (which magnifies whatever reaches it), or
another definition. Training amplifies it from there, so a run's later distances say little, and no other
run, which may itself have jumped, sets the scale: the truth's own path does. Whether the same engine's
float64 run stays on the truth tells a flip from a definition.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from multidev.outputs.trace import STATISTICS, _file, steps

#: float32 gradients within 1e-4 of float64's on smooth cases (contract: Tolerances); a bf16 update within 0.3
#: of float32's (the kit's BF16_STEP_RTOL). A flipped ReLU moves a gradient by up to 20%.
GRADIENT_SHARE = {"float32": 1e-4, "bf16": 0.3}

#: what storing and summing in float32 alone leaves, relative to an array's largest value (2^-24 per value,
#: a few hundred additions deep): the reach before an array has moved
STORAGE = 1e-6

#: A float64 run within this of the float64 truth defines everything the same: far below float32's 6e-8 per
#: operation amplified by training, far above float64's 1e-16 (an epoch of ResNet-18 on digits: 2e-9).
SAME_DEFINITION = 1e-6

#: an array is measured against its largest magnitude, but never one below this share of the model's largest
FLOOR = 1e-3

#: An array the truth keeps still (its way is below this share of the farthest array's: a convolution's bias
#: before BatchNorm, whose gradient is zero) moves by rounding alone in every run: it marks no birth.
STILL = 1e-9


def _scales(arrays: dict[str, np.ndarray], statistics: set[str]) -> dict[str, float]:
    """Each array's largest magnitude, or :data:`FLOOR` of the largest of its kind where that is more.

    A convolution's bias before BatchNorm has a gradient of zero, so its value is rounding alone (1e-9 in
    float32, 1e-17 in float64), and against its own size every run would part by 100%. Parameters and running
    statistics (a variance may be 100 where weights are 0.1) each have their own floor.
    """
    largest = {name: float(np.abs(a).max(initial=0.0)) for name, a in arrays.items()}
    floors = {kind: max(FLOOR * max((v for n, v in largest.items() if (n in statistics) == kind), default=0.0),
                        1e-30) for kind in (False, True)}
    return {name: max(v, floors[name in statistics]) for name, v in largest.items()}


def errors(a: dict[str, np.ndarray], b: dict[str, np.ndarray], statistics: set[str] = frozenset()) -> dict[str, float]:
    """Per array, max |a - b| over its scale (:func:`_scales` of the larger of the two)."""
    pairs = {name: (np.asarray(value, np.float64), np.asarray(b[name], np.float64)) for name, value in a.items()}
    scales = _scales({n: np.maximum(np.abs(x), np.abs(y)) for n, (x, y) in pairs.items()}, statistics)
    return {name: float(np.abs(x - y).max(initial=0.0)) / scales[name] for name, (x, y) in pairs.items()}


@dataclass
class Birth:
    """Where a run first leaves its reach: the step, the array, its distance there and the reach it left."""

    step: int
    array: str
    value: float
    reach: float

    def __str__(self) -> str:
        return f"born at step {self.step} in {self.array} ({self.value:.1e}, reach {self.reach:.0e})"


@dataclass
class Divergence:
    """A run's distance from the truth run (labelled ``truth``) at each traced step, and where it was born."""

    truth: str
    steps: list[int] = field(default_factory=list)
    max: list[float] = field(default_factory=list)
    median: list[float] = field(default_factory=list)
    #: the array farthest from the truth at each step
    worst: list[str] = field(default_factory=list)
    born: Optional[Birth] = None

    def at(self, step: int) -> Optional[float]:
        return self.max[self.steps.index(step)] if step in self.steps else None

    def to_dict(self) -> dict:
        return asdict(self)


def _load(folder: Path, step: int) -> tuple[dict[str, np.ndarray], set[str]]:
    with np.load(_file(folder, step)) as f:
        arrays = {name: f[name] for name in f.files if name != STATISTICS}
        stats = set(f[STATISTICS].tolist()) if STATISTICS in f.files else set()
    return arrays, stats


def measure(truth: Path, run: Path, label: str, dtype: str = "float32", precision: str = "fp32") -> Divergence:
    """Distance of ``run``'s trace from ``truth``'s at every step both saved, and where it left its reach.

    A float64 run's reach is :data:`SAME_DEFINITION`; a float32 one's grows with the way each array of the
    truth has travelled since step 0 (summed over the traced steps), by :data:`GRADIENT_SHARE`.
    """
    out = Divergence(label)
    share = GRADIENT_SHARE["bf16" if precision == "bf16" else "float32"]
    travelled: dict[str, float] = {}
    before = _load(truth, 0)[0] if 0 in steps(truth) else None
    for step in sorted(set(steps(truth)) & set(steps(run)) - {0}):
        (t, stats), (r, _) = _load(truth, step), _load(run, step)
        e = errors(r, t, stats)
        if before is not None:
            for name, moved in errors(t, before, stats).items():
                travelled[name] = travelled.get(name, 0.0) + moved
        before = t
        worst = max(e, key=e.get) if e else ""
        out.steps.append(step)
        out.max.append(e.get(worst, 0.0))
        out.median.append(float(np.median(list(e.values()))) if e else 0.0)
        out.worst.append(worst)
        if out.born is None:
            still = STILL * max(travelled.values(), default=0.0)
            reach = {n: SAME_DEFINITION if dtype == "float64" else STORAGE + share * travelled.get(n, 0.0) for n in e}
            beyond = {n: v / reach[n] for n, v in e.items() if v > reach[n] and travelled.get(n, 1.0) >= still}
            if beyond:
                name = max(beyond, key=beyond.get)
                out.born = Birth(step, name, e[name], reach[name])
    return out


def describe_float64(run: Divergence) -> str:
    """'same definition' where a float64 run stays on the float64 truth; otherwise where it leaves it."""
    if run.born is None:
        return f"same definition (float64 within {max(run.max, default=0.0):.0e})"
    return f"another definition: {run.born}"


def describe_float32(run: Divergence, engine: str, float64: Optional[Divergence], float64_possible: bool,
                     truth: bool = False) -> str:
    """'rounding' where ``run`` stays within its reach; otherwise where it was born, and why as far as the same
    engine's float64 run tells (``truth``: the engine's float64 run is the truth itself)."""
    born = run.born
    if born is None:
        return "rounding"
    if truth or (float64 is not None and float64.born is None):  # a flipped ReLU, or a variance within epsilon
        return f"rounding: {born}; {'its float64 run is the truth' if truth else 'float64 agrees'}"
    if float64 is not None:
        return f"another definition: {born}; float64 {float64.born}"
    tell = "--float64 tells" if float64_possible else f"{engine} has no float64 to tell"
    return f"{born}: a flipped ReLU or another definition ({tell})"
