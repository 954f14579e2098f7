"""JAX's persistent compilation cache, on by default in a per-user folder: a second identical run skips XLA.

Compiling ResNet-18's steps takes seconds (its train step: about 3 s on 2
cores); with the cache a later run of the same job loads them instead. JAX's cache key holds the host CPU's
feature list (its CPU topology), so an executable built on one CPU is never
loaded on another; the folder is also named after the CPU, so machines that
share a home folder keep apart entries. Set ``MULTIDEV_COMPILE_CACHE=off``
(or ``multidev train --no-compile-cache``) to compile every run afresh, or to
a folder to keep the cache there. A folder the user gave JAX itself
(``jax_compilation_cache_dir``) is kept.

In a job of several processes rank 0 compiles and writes, and the others
load its executables (see :mod:`.shared_compile`).

Like the CPU device count, it is applied on the engine's first call of a
run, never at import: JAX decides once, at its first compilation, whether a
cache is used.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator, Optional

import jax

from multidev.engine import cache_home, cpu_tag

ENV = "MULTIDEV_COMPILE_CACHE"
OFF = ("0", "off", "false", "no")
_HIT = "/jax/compilation_cache/cache_hits"
_COMPILE = "/jax/core/compile/backend_compile_duration"  # XLA compiled, or JAX's cache handed one back
_hits = [0]
_compiles = [0]
_note: list[str] = []
_folder: list[Path] = []


def _count(event: str, **_: object) -> None:
    if event == _HIT:
        _hits[0] += 1


def _timed(event: str, _seconds: float, **_: object) -> None:
    if event == _COMPILE:
        _compiles[0] += 1


def hits() -> int:
    """Executables this process loaded from the persistent cache so far."""
    return _hits[0]


def compiles() -> int:
    """Programs this process handed to XLA or to JAX's cache so far (not JAX's in-process copies)."""
    return _compiles[0]


@contextmanager
def bypassed() -> Iterator[None]:
    """JAX's cache neither read nor written meanwhile, so XLA compiles: a step to be kept whole (:mod:`.kept_steps`)
    must be XLA's, as one the cache hands back cannot be kept, and a later run loads the kept step instead."""
    reset = getattr(_jax_cache(), "reset_cache", None)
    if reset is None or not jax.config.jax_enable_compilation_cache:
        yield
        return
    jax.config.update("jax_enable_compilation_cache", False)
    reset()  # JAX decides once whether its cache is used: asked again at the next compile
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", True)
        reset()


def _jax_cache() -> ModuleType:
    from jax.experimental.compilation_cache import compilation_cache

    return compilation_cache


def default_folder() -> Path:
    return cache_home() / "jax-compile"


def configure() -> None:
    """Point JAX at the cache folder (or switch the cache off) once per process, before anything compiles."""
    if _note:
        return
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        jax.config.update("jax_enable_compilation_cache", False)
        _note.append(f"off ({ENV}={value})")
        return
    jax.monitoring.register_event_listener(_count)
    jax.monitoring.register_event_duration_secs_listener(_timed)
    if jax.config.jax_compilation_cache_dir and not value:
        _note.append(f"{jax.config.jax_compilation_cache_dir} (JAX's own setting, kept)")
        _folder.append(Path(jax.config.jax_compilation_cache_dir))
        return
    folder = Path(value or default_folder()) / cpu_tag()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)  # executables are code: the user's alone
    except OSError as exc:
        _note.append(f"off: cannot create {folder} ({exc.strerror}); set {ENV} to a writable folder")
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    _folder.append(folder)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # JAX skips compiles under 1 s
    _note.append(f"{folder} ({ENV}=off turns it off; in a job rank 0 compiles and writes, and its other "
                 f"processes on the same CPU kind load rank 0's executables)")


def folder() -> Optional[Path]:
    """This CPU's cache folder, or None when the cache is off (or could not be made)."""
    configure()
    return _folder[0] if _folder else None


def note() -> str:
    """Where the cache lives, or why there is none: a line for ``multidev backends``."""
    configure()
    return _note[0]
