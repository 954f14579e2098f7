"""The test run's own start-up, as the multidev command's: every usable core for the frameworks' CPU threads.

MXNet reads OMP_NUM_THREADS only when it loads and takes half the cores without it; the engines set no
variable themselves (tests/test_side_effects.py), so the test program does, as `multidev` does.
"""

import atexit
import ctypes
import ctypes.util
import gc
import os
import shutil
import sys
import tempfile

import pytest

from multidev.processes.threads import apply_threads

apply_threads(None)

# The engines' measured forms pinned, so that results do not depend on a timing or the machine's load; the tests
# of each form check its measuring (backends/jax/tests/test_sums.py, test_threads.py, test_parts.py,
# test_conv_inputs.py; backends/torch/tests/test_cpu_layout.py). MULTIDEV_TEST_MEASURED=1 pins none: the engines
# then pick what this CPU runs fastest, as users' runs do (.ci/kit-measured).
MEASURED = os.environ.get("MULTIDEV_TEST_MEASURED", "").strip() == "1"
_PINS = {
    "MULTIDEV_JAX_SUMS": "matvec",          # BatchNorm's sums
    "MULTIDEV_JAX_THREADS": "cores",        # XLA's threads per step
    "MULTIDEV_JAX_PARTS": "whole",          # a device's parts: one JAX device per named device
    "MULTIDEV_JAX_CONV_INPUTS": "fused",    # the convolutions' inputs, recomputed where read as XLA fuses them
    "MULTIDEV_TORCH_LAYOUT": "nchw",        # the torch engine's image layout on CPUs
}
if not MEASURED:
    for _name, _form in _PINS.items():
        os.environ.setdefault(_name, _form)


def pytest_configure(config):
    """The quick suite (``-m 'not slow ...'``, the default) compiles JAX's programs with LLVM's optimisation off.

    Its hundreds of tiny programs are compiled once and run a step or two: a LeNet float64 gradient compiles in
    0.8 s instead of 2.4 s, and the JAX engine's quick tests take 114 s instead of 179 s (AMD EPYC, 2 cores). The
    promises are judged against a float64 truth either way; the slow run (``-m slow``) keeps XLA's default, which
    users get, and trains at its speed. Subprocesses inherit the flag.
    """
    if quick(config) and not MEASURED and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()


def quick(config) -> bool:
    """The quick suite: the default marker expression, ``not slow and not zoo`` (pyproject.toml)."""
    return (config.option.markexpr or "").replace(" ", "").startswith("notslow")


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject.toml): the quick suite on 2 processes, more on 4+ cores; the slow run on one.

    The quick suite's tests each run a single thread for most of their time: 2 processes on 2 cores take it from
    9 to under 6 minutes (AMD EPYC Zen 3). Each process imports every framework (about 2.5 GB at its peak), so at
    most 4. The slow run's jobs start processes of their own, each with the cores its share of them gives, and
    time a killed worker's end: they run one at a time.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cores, 4) if quick(config) and cores >= 2 else 0


# Compiled programs go to a folder of this test run (workers and subprocesses inherit it), not the user's cache.
# The JAX engine's steps kept whole are not loaded: tests change what a program is built from (a pin, a kept
# choice, a patched function) under one key; backends/jax/tests/test_kept_steps.py switches them on.
os.environ.setdefault("MULTIDEV_JAX_KEPT_STEPS", "off")
if not os.environ.get("MULTIDEV_COMPILE_CACHE"):
    os.environ["MULTIDEV_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="multidev-test-compile-cache-")
    atexit.register(shutil.rmtree, os.environ["MULTIDEV_COMPILE_CACHE"], True)

# Memory. The quick suite builds hundreds of models of different shapes in one process; a run of it peaked at 7.2 GB,
# and held it. MXNet keeps a oneDNN primitive for every shape it met (MXNET_MKLDNN_CACHE_NUM: -1, no limit), JAX
# keeps every compiled program, and glibc keeps freed memory for reuse. A test program sets this, not the engines
# (they set no variable: tests/test_side_effects.py).
os.environ.setdefault("MXNET_MKLDNN_CACHE_NUM", "64")
_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform.startswith("linux") else None


def _resident_mib() -> float:
    try:
        with open("/proc/self/status") as status:
            return next(int(ln.split()[1]) for ln in status if ln.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return 0.0


_FLOOR = [0.0]  # resident MiB after the last give-back


def _give_back() -> None:
    """Collect the cycles models leave (Gluon's blocks, replicas) now, and hand freed memory back to the system."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    _FLOOR[0] = _resident_mib()


@pytest.fixture(autouse=True, scope="module")
def _release_memory():
    """After each test file: drop compiled programs and give freed memory back."""
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    if "multidev_jax.steps" in sys.modules:
        sys.modules["multidev_jax.steps"].steps.cache_clear()
        sys.modules["multidev_jax.compiled"]._CACHE.clear()
    _give_back()


@pytest.fixture(autouse=True)
def _release_memory_when_high():
    """After a test that left 512 MB more than the last give-back (a collection costs time: not after every test)."""
    yield
    if _resident_mib() > _FLOOR[0] + 512:
        _give_back()
