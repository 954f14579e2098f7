"""Where a run starts: fresh, from ``--resume``'s checkpoint, from its own with ``--resume auto``, or, restarted
after a fault, from the checkpoint its job wrote (contract: Restarts)."""

from __future__ import annotations

from pathlib import Path

from multidev.errors import MultidevError
from multidev.outputs import checkpoint as ckpt
from multidev.processes.faults import restart_count, written_by_this_job
from multidev.settings.run import AUTO, Settings


def check_unfinished(path: str, epochs: int) -> None:
    """One line when the checkpoint a user names has every epoch asked for already."""
    epoch, _ = ckpt.resumes_at(path)
    if epoch > epochs:
        raise MultidevError(f"nothing to train: {path} is already at epoch {epoch - 1}; raise --epochs")


def starting_point(s: Settings) -> Settings:
    """``s`` with ``resume`` the checkpoint this process starts from (None: fresh).

    A run's own checkpoint (``--resume auto``, or a restart) may hold every
    epoch already: the run then trains none and returns the saved history.
    """
    if restart_count() and s.checkpoint is not None and written_by_this_job(s.checkpoint):
        return s.replace(resume=s.checkpoint)
    if s.resume == AUTO:
        return s.replace(resume=s.checkpoint if Path(str(s.checkpoint)).is_file() else None)
    if s.resume is not None:
        check_unfinished(s.resume, s.epochs)
    return s
