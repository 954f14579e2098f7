"""Ctrl-C and SIGTERM stop training at the next step boundary, so nothing done is lost.

The first signal only raises a flag that the training loop reads after each
step; the loop then saves a checkpoint of the work so far and raises
:class:`Interrupted`. The handler also gives the signal back to the system,
so a second one ends the process at once, even inside a long framework call;
the checkpoint on disk is then the previous one, whole (files are replaced
atomically).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """Training stopped on a signal, at a step boundary; ``checkpoint`` holds the work done, if one was asked for."""

    def __init__(self, epoch: int, step: int, checkpoint: Optional[str], signum: Optional[int]) -> None:
        # a rank may stop because another rank was signalled: it counts as Ctrl-C
        self.epoch, self.step, self.checkpoint, self.signum = epoch, step, checkpoint, signum or signal.SIGINT
        #: another process says where the job stands (its launcher, or rank 0): the command line prints nothing
        self.quiet = False
        where = f"interrupted at epoch {epoch}, step {step}"
        if checkpoint is None:
            message = f"{where}: nothing saved (train with --checkpoint PATH to keep the work done)"
        else:
            message = (f"{where}: checkpoint saved to {checkpoint}; the same command with --resume {checkpoint} (or "
                       f"--resume auto) continues it")
        super().__init__(message)


class StopFlag:
    """Set by the first SIGINT or SIGTERM while installed; read by the loop between steps."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None

    def __bool__(self) -> bool:
        return self.signum is not None


@contextlib.contextmanager
def stop_at_step_boundary() -> Iterator[StopFlag]:
    """Install the handlers for the duration of a run (main thread only; elsewhere signals act as usual)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}

    def handler(signum, frame) -> None:
        flag.signum = signum
        for s in SIGNALS:  # a second signal takes the system's default action: exit at once
            signal.signal(s, signal.SIG_DFL)

    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
