"""CPU threads as the ``multidev`` command sets them, for a benchmark that times what a user of it would see."""

from __future__ import annotations

import os

from bench.harness.machine import usable_cores


def as_the_command() -> None:
    """``OMP_NUM_THREADS`` = every usable core unless already set, before any framework loads (MXNet reads it
    then, and alone would take half the cores); the processes started later inherit it."""
    if not os.environ.get("OMP_NUM_THREADS", "").strip():
        os.environ["OMP_NUM_THREADS"] = str(usable_cores())
