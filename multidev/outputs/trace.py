"""A trace: a run's trainable parameters after its first steps and every epoch, for ``multidev compare``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from multidev.engines.protocol import Replicas
from multidev.rules.models import ModelSpec

#: Steps (counted from the start of training) whose parameters a trace keeps, besides every epoch's end.
TRACE_STEPS = (1, 2, 4, 8, 16)


def _file(folder: Path, step: int) -> Path:
    return folder / f"step-{step:07d}.npz"


class Trace:
    """Saves the trainable parameters of ``replicas`` at the traced steps, into ``folder``."""

    def __init__(self, folder: str | Path, spec: ModelSpec) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.names = spec.trainable()

    @staticmethod
    def wants(step: int, end_of_epoch: bool) -> bool:
        return step in TRACE_STEPS or end_of_epoch

    def __call__(self, step: int, end_of_epoch: bool, replicas: Replicas) -> None:
        if self.wants(step, end_of_epoch):
            state = replicas.state()
            np.savez(_file(self.folder, step), **{name: state[name] for name in self.names})


def steps(folder: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in folder.glob("step-*.npz"))
