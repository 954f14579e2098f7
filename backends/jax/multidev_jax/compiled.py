"""Compile each step once per process and shape, and count the seconds it took.

XLA compilation is a one-time cost that would otherwise hide inside the first
epoch. Steps are compiled ahead of time (``jit(...).lower(...).compile()``)
so the time is measured exactly; executables are kept in a process-wide cache
so a second replica set of the same model, mode and mesh pays nothing.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Hashable

import jax

_CACHE: dict[Hashable, jax.stages.Compiled] = {}


class Compiler:
    """Hands out compiled steps; ``seconds`` is what this owner spent compiling (tracing included)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def get(self, key: Hashable, jitted: Callable[..., Any], *args: Any) -> jax.stages.Compiled:
        compiled = _CACHE.get(key)
        if compiled is None:
            start = time.perf_counter()
            compiled = jitted.lower(*args).compile()  # type: ignore[attr-defined]
            self.seconds += time.perf_counter() - start
            _CACHE[key] = compiled
        return compiled


def cached_count() -> int:
    """Executables compiled so far in this process (for tests)."""
    return len(_CACHE)
