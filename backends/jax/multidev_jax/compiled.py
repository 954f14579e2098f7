"""Compile each step once per process and shape, and count the seconds it took.

XLA compilation is a one-time cost that would otherwise hide inside the first
epoch. Steps are compiled ahead of time (``jit(...).lower(...).compile()``)
so the time is measured exactly; executables are kept in a process-wide cache
so a second replica set of the same model, mode and mesh pays nothing.
In a job of several processes rank 0 compiles each step and the others load
its executable (:mod:`.shared_compile`), or, across CPUs of different kinds,
each compiles its own; either way the first one done would wait for the
others inside the step's first collective, which the epoch would count as
training; a barrier after each compile counts that wait here.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Hashable, Optional

import jax

from multidev.engine import doing

from . import compile_cache, distributed
from .forms import threads as xla_threads

_CACHE: dict[Hashable, jax.stages.Compiled] = {}


class Compiler:
    """Hands out compiled steps; ``seconds`` is what this owner spent compiling (tracing included).

    ``cached`` counts the executables that came from JAX's persistent cache
    (see :mod:`.compile_cache`) rather than from XLA. ``threads``: the run's
    form of XLA's threads (:mod:`.forms.threads`; None: each program's
    measured form).
    """

    def __init__(self, threads: Optional[str] = None) -> None:
        self.seconds = 0.0
        self.cached = 0
        self.threads = threads

    def get(self, key: Hashable, jitted: Callable[..., Any], *args: Any) -> jax.stages.Compiled:
        compiled = _CACHE.get(key)
        if compiled is None:
            start, hits = time.perf_counter(), compile_cache.hits()
            name = str(key[0]) if isinstance(key, tuple) and key else str(key)
            with doing(f"compiling {name}"):
                lowered = jitted.lower(*args)  # type: ignore[attr-defined]
                compiled = xla_threads.compile(lowered, name, args, self.threads)
            if jax.process_count() > 1:  # every process compiles the same steps in the same order
                distributed.barrier()
            self.seconds += time.perf_counter() - start
            self.cached += compile_cache.hits() > hits
            _CACHE[key] = compiled
        return compiled


def cached_count() -> int:
    """Executables compiled so far in this process (for tests)."""
    return len(_CACHE)
