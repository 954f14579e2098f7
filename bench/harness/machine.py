"""The facts of the machine a benchmark ran on: CPU, GPU, framework versions and the commit.

The one place the benchmarks read the CPU (``/proc/cpuinfo``): its kind names
the folder its results are kept in (``bench/results/<kind>/``), because a
figure measured on one kind of CPU says nothing of another (the JAX engine's
best forms differ between an Intel Xeon and an AMD EPYC). Versions come from
the installed metadata, so reading them loads no framework.

    python -m bench.harness        # the facts, as JSON
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Optional

from multidev.engines.cpu_kind import identity, processor, this_cpu_kind

ROOT = Path(__file__).resolve().parents[2]
#: the feature flags that change which kernels the frameworks run
VECTOR_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                "amx_fp16", "asimd", "sve")
DISTRIBUTIONS = ("numpy", "torch", "jax", "jaxlib", "flax", "optax", "keras", "mxnet", "multidev",
                 "multidev-torch", "multidev-jax", "multidev-mxnet")


@dataclass(frozen=True)
class Cpu:
    vendor: str
    model_name: str
    family: Optional[int]
    model: Optional[int]
    flags: tuple[str, ...]  # those of VECTOR_FLAGS it has
    mhz: float              # /proc/cpuinfo's clock: the nominal one in a virtual machine
    cores: int              # the cores this process may run on
    kind: str


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def cpu() -> Cpu:
    """This machine's CPU, from the first processor of /proc/cpuinfo (the platform's name where unreadable)."""
    vendor, name, family, model, flags = identity()
    return Cpu(vendor, name, family, model, tuple(f for f in VECTOR_FLAGS if f in flags),
               float(processor().get("cpu MHz", 0) or 0), usable_cores(), this_cpu_kind())


@lru_cache(maxsize=1)
def gpu() -> str:
    """The first NVIDIA GPU's name ('' without one), from nvidia-smi: no framework loads to ask."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip().splitlines()[0].strip() if done.stdout.strip() else ""


def gpu_kind(name: str) -> str:
    """``nvidia-h100`` from ``NVIDIA H100 80GB HBM3``: the folder of a GPU run's results."""
    words = name.lower().replace("nvidia", "").split()
    return "nvidia-" + (words[0] if words else "gpu")


def versions() -> dict[str, str]:
    """Installed versions of the frameworks and of multidev's packages (absent ones left out)."""
    found = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"python": platform.python_version(), **found}


def commit() -> dict[str, object]:
    """The checkout's commit, and whether files it tracks were changed ('unknown' outside a git checkout)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": False}


def facts() -> dict[str, object]:
    """Everything above, for a result file."""
    return {"cpu": asdict(cpu()), "gpu": gpu(), "memory_gib": _memory_gib(), "versions": versions(), **commit()}


def _memory_gib() -> float:
    try:
        return round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2 ** 30, 1)
    except (ValueError, OSError, AttributeError):
        return 0.0
