"""Load MXNet on the engine's first use; every other module gets ``mx`` from here.

Importing this package loads nothing and changes nothing in the process. Two
facts of MXNet 1.9.1 matter when it loads:

- It reads its thread count once, from ``OMP_NUM_THREADS``, when it loads,
  and without it assumes hyperthreading and uses half the cores: one thread on
  a 2-core machine, which halves ResNet-18 training (measured 39 against 77
  samples/s). It offers no call to change that later, and the engine sets no
  environment variable: the ``multidev`` command sets ``OMP_NUM_THREADS`` for
  its own process at start-up (``--threads``, default every usable core), and
  a library user who loads MXNet without it is told so in one warning line.
- It reads ``numpy.bool`` at import, an alias numpy 1.24 removed. The alias is
  put back for the import alone, so no other library ever sees it.
- It loads scikit-learn (for the base class of its legacy ``FeedForward``) and
  SciPy's statistics (for quantization's calibration): 0.5 s of a run's 3 s
  to its first step (measured on 2 cores). Both are hidden from the import
  alone; quantization gets SciPy's statistics when it first uses them.
- Its operator tuning, timed as it loads, decides per operator whether its
  elementwise kernels use the OpenMP threads, and counts half the cores as
  its threads do: on 2 cores every elementwise operator ran on one thread
  (a product on (32, 144, 32, 32): 4.4 ms, on both threads 1.7 ms;
  MobileNetV2's step at 44-50 samples/s, 72-75 without the tuning).
- Its OpenBLAS (0.3.13, for ``batch_dot``, attention's products) takes its
  SSE3 kernels (``Prescott``) on a CPU it does not know, as an Intel Xeon of
  model 207: a ViT's ``batch_dot`` at 1.86 ms a call, with the AVX2 kernels
  1.16 ms.

So MXNet loads with :func:`load_env`'s settings, each where the environment
names none: the tuning off, and OpenBLAS's kernels named for the CPU's vector
units. Both are read once, as the library loads, so they are set for the
import alone.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np

from multidev.engine import cpu_flags, this_cpu_kind, usable_cores

THREADS_ENV = "OMP_NUM_THREADS"
log = logging.getLogger("multidev.mxnet")
_state: dict[str, str] = {}


def threads_note() -> str:
    """How many threads MXNet runs on and why ("" before MXNet is loaded)."""
    return _state.get("threads", "")


def openblas_kernels(module: ModuleType) -> str:
    """The kernels MXNet's own OpenBLAS took as it loaded ("" where its wheel has none)."""
    found = sorted(Path(module.__file__).parent.glob("libopenblas.so*"))
    if not found:
        return ""
    blas = ctypes.CDLL(str(found[0]))  # already loaded by MXNet: the same library, nothing initialised again
    corename = getattr(blas, "openblas_get_corename", None)
    if corename is None:
        return ""
    corename.restype = ctypes.c_char_p
    return corename().decode()


def load_note() -> str:
    """What the engine added to MXNet's environment as it loaded, and the OpenBLAS kernels that came of it ("" before
    MXNet is loaded)."""
    if sys.modules.get("mxnet") is None:
        return ""
    kernels = openblas_kernels(sys.modules["mxnet"])
    said = f"; OpenBLAS runs its {kernels} kernels" if kernels else ""
    added = _state.get("loaded with")
    if added is None:  # set by this module's import of MXNet alone
        return f"mxnet was imported before the engine: its load-time settings are the environment's own{said}"
    return f"loaded with {added or 'the environment as it was'} (read once, as MXNet loads; the environment's own " \
           f"values stand){said}"


#: what MXNet imports and training never uses: hidden from its import (an ImportError it catches)
UNUSED = ("sklearn", "scipy.stats")


class _OnFirstUse(ModuleType):
    """A module imported when one of its names is first read."""

    def __getattr__(self, name: str) -> object:
        return getattr(importlib.import_module(self.__name__), name)


def openblas_core(kind: str, flags: frozenset[str]) -> str:
    """OpenBLAS's kernels nearest the CPU's vector units ("" below AVX2: OpenBLAS's own choice stands);
    OpenBLAS falls back itself where the CPU lacks what a name needs (here ``SkylakeX`` gives ``Haswell``)."""
    if not {"avx2", "fma"} <= flags:
        return ""
    if kind.startswith("amd"):
        return "Zen"
    return "SkylakeX" if "avx512f" in flags else "Haswell"


def load_env() -> dict[str, str]:
    """What MXNet reads as it loads, beyond the environment's own: the values the environment leaves unset."""
    wanted = {"MXNET_USE_OPERATOR_TUNING": "0", "OPENBLAS_CORETYPE": openblas_core(this_cpu_kind(), cpu_flags())}
    return {name: value for name, value in wanted.items() if value and name not in os.environ}


def _import() -> ModuleType:
    patched = "bool" not in np.__dict__  # numpy 2 has it again; then there is nothing to do
    if patched:
        np.bool = bool  # type: ignore[attr-defined]
    hidden = [name for name in UNUSED if name not in sys.modules]
    sys.modules.update(dict.fromkeys(hidden))
    added = load_env()
    os.environ.update(added)
    try:
        import mxnet
    finally:
        for name in added:
            del os.environ[name]
        for name in hidden:
            del sys.modules[name]
        if patched:
            del np.bool  # type: ignore[attr-defined]
    _state["loaded with"] = ", ".join(f"{name}={value}" for name, value in added.items())
    quantization = sys.modules.get("mxnet.contrib.quantization")
    if quantization is not None and getattr(quantization, "stats", 0) is None:
        quantization.stats = _OnFirstUse("scipy.stats")  # type: ignore[attr-defined]
    return mxnet


def _describe(imported_before: bool) -> str:
    given = os.environ.get(THREADS_ENV, "").strip()
    if given:
        return f"{THREADS_ENV}={given} from the environment"
    cores = usable_cores()
    if cores < 2:
        return f"{THREADS_ENV} unset: 1 thread on 1 core"
    where = "mxnet was imported before the engine" if imported_before else "MXNet loaded"
    return (f"{THREADS_ENV} unset when {where}: MXNet uses {max(cores // 2, 1)} of {cores} cores; "
            f"set {THREADS_ENV}={cores} before it loads (the multidev command does)")


def mxnet() -> ModuleType:
    """MXNet, loaded on the first call; says once when it runs on half the cores."""
    if "mxnet" in sys.modules:
        module = sys.modules["mxnet"]
        _state.setdefault("threads", _describe(imported_before=True))
        return module
    module = _import()
    _state["threads"] = _describe(imported_before=False)
    log.info("mxnet %s: %s; %s", module.__version__, threads_note(), load_note())
    if "uses" in threads_note():
        warnings.warn(threads_note(), stacklevel=2)
    return module


__all__ = ["THREADS_ENV", "load_env", "load_note", "mxnet", "openblas_core", "threads_note", "usable_cores"]
