"""CPU threads: every usable core, shared out among the worker processes of a machine."""

from __future__ import annotations

import contextlib
import os
from typing import Optional

from multidev.errors import MultidevError


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def apply_threads(value: Optional[int] = None, share: int = 1) -> None:
    """This program's CPU threads, set before any framework loads: some read the count only then.

    ``OMP_NUM_THREADS`` for this process and the runs it starts; one the user
    exported already stands unless ``--threads`` is given. The default is every
    usable core (MXNet alone would take half of them), split evenly over the
    ``share`` worker processes a launch starts on this machine (measured with
    two torch workers on 2 cores: 19 s an epoch at 2 threads each, 3.4 s at 1).
    """
    if value is not None and value < 1:
        raise MultidevError(f"--threads must be at least 1, got {value}")
    if value is not None or not os.environ.get("OMP_NUM_THREADS", "").strip():
        os.environ["OMP_NUM_THREADS"] = str(value or max(1, usable_cores() // max(share, 1)))


@contextlib.contextmanager
def worker_threads(processes: int):
    """The workers' share of the cores, for this launch only, unless the caller set OMP_NUM_THREADS."""
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        yield
        return
    os.environ["OMP_NUM_THREADS"] = str(max(1, usable_cores() // processes))
    try:
        yield
    finally:
        del os.environ["OMP_NUM_THREADS"]
