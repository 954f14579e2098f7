"""Load MXNet the way this engine needs it, on first use; every other module gets ``mx`` from here.

Importing this package changes nothing in the process. MXNet itself is loaded
the first time the engine is used (a version, a GPU count, a model), and two
facts of MXNet 1.9.1 are handled then, for the import alone:

- Its thread count is read once, when the library loads. Without
  ``OMP_NUM_THREADS`` it assumes hyperthreading and uses half the cores: one
  thread on a 2-core machine, which halves ResNet-18 training (measured 39
  against 77 samples/s). The engine's setting, :data:`THREADS_ENV` if the user
  set it, else every usable core, is put into the environment for the import
  and the environment is restored right after (MXNet keeps what it read).
- It reads ``numpy.bool`` at import, an alias numpy 1.24 removed. The alias is
  put back for the import alone, so no other library ever sees it.
"""

from __future__ import annotations

import logging
import os
import sys
from types import ModuleType
from typing import Optional

import numpy as np

THREADS_ENV = "OMP_NUM_THREADS"
log = logging.getLogger("multidev.mxnet")
_state: dict[str, str] = {}


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads_note() -> str:
    """What MXNet's thread count is and who chose it ("" before MXNet is loaded)."""
    return _state.get("threads", "")


def _import(threads: Optional[int]) -> ModuleType:
    given = os.environ.get(THREADS_ENV, "").strip()
    chosen = given or str(threads or usable_cores())
    saved = os.environ.get(THREADS_ENV)
    patched = "bool" not in np.__dict__  # numpy 2 has it again; then there is nothing to do
    os.environ[THREADS_ENV] = chosen
    if patched:
        np.bool = bool  # type: ignore[attr-defined]
    try:
        import mxnet
    finally:
        if patched:
            del np.bool  # type: ignore[attr-defined]
        if saved is None:
            del os.environ[THREADS_ENV]
        else:
            os.environ[THREADS_ENV] = saved
    source = "from the environment" if given else "chosen by multidev-mxnet (all usable cores)"
    _state["threads"] = f"{THREADS_ENV}={chosen} {source}, read by MXNet when it loaded"
    return mxnet


def mxnet(threads: Optional[int] = None) -> ModuleType:
    """MXNet, loaded on the first call with ``threads`` (default: every usable core)."""
    if "mxnet" in sys.modules:
        if not _state:
            _state["threads"] = (f"{THREADS_ENV} left to MXNet: it was imported before the engine, and reads "
                                 f"its thread count only when it loads")
        return sys.modules["mxnet"]
    module = _import(threads)
    log.info("mxnet %s: %s", module.__version__, threads_note())
    return module


__all__ = ["THREADS_ENV", "mxnet", "threads_note", "usable_cores"]
