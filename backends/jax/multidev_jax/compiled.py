"""Compile each step once per process and shape, and count the seconds it took.

XLA compilation is a one-time cost that would otherwise hide inside the first
epoch. Steps are compiled ahead of time (``jit(...).lower(...).compile()``)
so the time is measured exactly; executables are kept in a process-wide cache
so a second replica set of the same model, mode and mesh pays nothing, and
on disk (:mod:`.kept_steps`) so a later run loads them untraced.
In a job of several processes rank 0 compiles each step and the others load
its executable (:mod:`.shared_compile`), or, across CPUs of different kinds,
each compiles its own; either way the first one done would wait for the
others inside the step's first collective, which the epoch would count as
training; a barrier after each compile counts that wait here.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Hashable, Optional

import jax

from multidev.engine import doing

from . import compile_cache, distributed, kept_steps
from .forms import threads as xla_threads
from .forms.choice import recording

_CACHE: dict[Hashable, jax.stages.Compiled] = {}


class Compiler:
    """Hands out compiled steps; ``seconds`` is what this owner spent compiling (tracing included).

    ``cached`` counts the executables that came from JAX's persistent cache
    (see :mod:`.compile_cache`) or were kept whole (:mod:`.kept_steps`) rather
    than from XLA. ``threads``: the run's
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
            start = time.perf_counter()
            name = str(key[0]) if isinstance(key, tuple) and key else str(key)
            kept = kept_steps.path(key, args)
            with doing(f"loading {name}"):
                compiled = kept_steps.load(kept, args) if kept else None
            if compiled is None:
                compiled = self._compile(name, kept, jitted, args)
            else:
                self.cached += 1
            if jax.process_count() > 1:  # every process compiles the same steps in the same order
                distributed.barrier()
            self.seconds += time.perf_counter() - start
            _CACHE[key] = compiled
        return compiled

    def _compile(self, name: str, kept: Optional[Path], jitted: Callable[..., Any],
                 args: tuple[Any, ...]) -> jax.stages.Compiled:
        """Traced, lowered and compiled: by XLA where the step is to be kept whole, else perhaps taken from JAX's
        cache; kept where XLA compiled it here."""
        hits, compiles = compile_cache.hits(), compile_cache.compiles()
        with doing(f"compiling {name}"), recording() as decisions:
            lowered = jitted.lower(*args)  # type: ignore[attr-defined]
            with compile_cache.bypassed() if kept is not None else nullcontext():
                compiled = xla_threads.compile(lowered, name, args, self.threads)
        if compile_cache.hits() > hits:
            self.cached += 1
        elif kept is not None and compile_cache.compiles() > compiles:  # not JAX's in-process copy of an earlier one
            kept_steps.save(kept, compiled, decisions)
        return compiled


def cached_count() -> int:
    """Executables compiled so far in this process (for tests)."""
    return len(_CACHE)
