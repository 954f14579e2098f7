"""Import MXNet the way this engine needs it; every other module imports ``mx`` from here.

Two facts about MXNet 1.9.1 make this module run before MXNet loads:

- Without ``OMP_NUM_THREADS`` MXNet assumes hyperthreading and uses half the
  cores: one thread on a 2-core machine, which halves ResNet-18 training speed
  (measured 39 against 77 samples/s). The variable is read when the library
  starts, so it is set here, to every usable core, and only if the user has not
  set it. :data:`THREADS` says what was chosen (``version()`` reports it).
- MXNet reads ``numpy.bool`` at import time, an alias numpy 1.24 removed. The
  alias is put back for the import alone and taken away again, so no other
  library ever sees it.
"""

from __future__ import annotations

import logging
import os
import sys
from types import ModuleType

import numpy as np

THREADS_ENV = "OMP_NUM_THREADS"
log = logging.getLogger("multidev.mxnet")


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def choose_threads() -> str:
    """Set ``OMP_NUM_THREADS`` to all usable cores unless the user did; return what was decided."""
    if "mxnet" in sys.modules:
        return f"{THREADS_ENV} left to MXNet: mxnet was imported before the engine"
    given = os.environ.get(THREADS_ENV, "").strip()
    if given:
        return f"{THREADS_ENV}={given} from the environment"
    os.environ[THREADS_ENV] = str(usable_cores())
    return f"{THREADS_ENV}={os.environ[THREADS_ENV]} set by multidev-mxnet (all usable cores)"


def import_mxnet() -> ModuleType:
    """``import mxnet`` with the ``numpy.bool`` alias present for the import only."""
    patched = "bool" not in np.__dict__  # numpy 2 has it again; then there is nothing to do
    if patched:
        np.bool = bool  # type: ignore[attr-defined]
    try:
        import mxnet
    finally:
        if patched:
            del np.bool  # type: ignore[attr-defined]
    return mxnet


THREADS = choose_threads()
mx = import_mxnet()
log.info("mxnet %s: %s", mx.__version__, THREADS)

__all__ = ["THREADS", "mx", "usable_cores"]
