"""A trace: a run's parameters and running statistics at its start, after its first steps and every epoch, for
``multidev compare``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from multidev.engines.protocol import Replicas
from multidev.rules.models import ModelSpec, State

#: Steps (counted from the start of training) whose parameters a trace keeps, besides every epoch's end.
TRACE_STEPS = (1, 2, 4, 8, 16)


def _file(folder: Path, step: int) -> Path:
    return folder / f"step-{step:07d}.npz"


#: the key under which a trace file lists which of its arrays are running statistics (not trained)
STATISTICS = "_statistics"


class Trace:
    """Saves the parameters and running statistics of ``replicas`` at the traced steps, into ``folder``;
    ``start``, a fresh run's first state, is step 0 (how far each array travels is measured from it)."""

    def __init__(self, folder: str | Path, spec: ModelSpec, start: Optional[State] = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.names, self.statistics = [p.name for p in spec.params()], spec.statistics()
        if start is not None:
            self._save(0, start)

    @staticmethod
    def wants(step: int, end_of_epoch: bool) -> bool:
        return step in TRACE_STEPS or end_of_epoch

    def __call__(self, step: int, end_of_epoch: bool, replicas: Replicas) -> None:
        if self.wants(step, end_of_epoch):
            self._save(step, replicas.state())

    def _save(self, step: int, state: State) -> None:
        arrays = {name: np.asarray(state[name]) for name in self.names}
        np.savez(_file(self.folder, step), **arrays, **{STATISTICS: np.array(self.statistics, dtype=str)})


def steps(folder: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in folder.glob("step-*.npz"))
