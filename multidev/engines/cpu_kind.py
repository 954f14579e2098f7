"""The CPU's kind (``amd-epyc-zen4``, ``intel-xeon-amx``, ...): what the fastest forms of a computation depend on.

Engines ship the forms their measuring chose on each kind met, so that a
first run on such a CPU measures nothing; the benchmarks keep their results
per kind. Read from /proc/cpuinfo's first processor, so no framework has to
load to answer.
"""

from __future__ import annotations

import platform
import re
from functools import lru_cache
from pathlib import Path
from typing import Optional


def first_processor(text: str) -> dict[str, str]:
    """The fields of /proc/cpuinfo's first processor."""
    first = text.split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}


def number(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def _amd_generation(family: Optional[int], model: Optional[int]) -> str:
    """Zen generation from the family and model numbers (AMD's published ranges)."""
    if family == 23:
        return "zen2" if model is not None and model >= 0x30 else "zen"
    if family == 25:
        zen4 = model is not None and (0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF)
        return "zen4" if zen4 else "zen3"
    if family == 26:
        return "zen5"
    return f"family{family}"


def cpu_kind(vendor: str, name: str, family: Optional[int], model: Optional[int], flags: frozenset[str]) -> str:
    """A short name for a CPU: ``amd-epyc-zen3``, ``intel-xeon-amx``, ``aarch64``, ..."""
    line = name.lower()
    if vendor == "AuthenticAMD":
        brand = next((f"amd-{b}" for b in ("epyc", "ryzen", "threadripper") if b in line), "amd")
        return f"{brand}-{_amd_generation(family, model)}"
    if vendor == "GenuineIntel":
        brand = "intel-xeon" if "xeon" in line else "intel"
        units = "amx" if "amx_tile" in flags else "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags \
            else "sse"
        return f"{brand}-{units}"
    return re.sub(r"[^a-z0-9]+", "-", (vendor or platform.machine() or "unknown").lower()).strip("-")


@lru_cache(maxsize=1)
def processor() -> dict[str, str]:
    """This machine's first processor's fields (empty where /proc/cpuinfo cannot be read)."""
    try:
        return first_processor(Path("/proc/cpuinfo").read_text())
    except OSError:
        return {}


def identity() -> tuple[str, str, Optional[int], Optional[int], frozenset[str]]:
    """This machine's CPU: (vendor, model name, family, model, feature flags), as :func:`cpu_kind` takes them."""
    info = processor()
    flags = frozenset(info.get("flags", info.get("Features", "")).split())
    vendor = info.get("vendor_id", info.get("CPU implementer", ""))
    name = info.get("model name", platform.processor() or platform.machine())
    return vendor, name, number(info.get("cpu family", "")), number(info.get("model", "")), flags


@lru_cache(maxsize=1)
def this_cpu_kind() -> str:
    """This machine's CPU kind, or the platform's name where /proc/cpuinfo cannot be read."""
    return cpu_kind(*identity())
