"""XLA's threads for each compiled step: every core per operation, or one, chosen by measurement per CPU kind and step.

XLA:CPU computes an operation on every core. Several virtual devices on the
same cores then run that many threads per core; one thread per operation
(``xla_cpu_multi_thread_eigen`` off) is sometimes faster and sometimes not:
on an Intel Xeon with 2 cores, ResNet-18 on 2 devices took 1.44 s a step of
64 28x28 images with every core against 1.29 s with one thread per
operation; on 8x8 digits one thread was the slower one day (3.1 against
2.7-2.9 s an epoch) and the faster the next (3.3-3.5 against 3.5-3.8 s). No
constant is right, so the first time a run compiles a step on two or more
CPU devices of one process, the engine compiles both forms, times each on
copies of the step's arguments (the run itself is untouched), and keeps the
faster, in ``threads.json`` beside the compilation cache (per CPU kind,
keyed by the step's program and ``XLA_FLAGS``); ``multidev backends`` says
what was chosen.

A run with one CPU thread (``OMP_NUM_THREADS=1``: ``--threads 1``, or a job's
worker with a core of its own) always takes ``one``: XLA reads neither that
variable nor the CPU affinity. ``MULTIDEV_JAX_THREADS=cores`` or ``one`` pins
a form (the test suite pins ``cores``, so that its results do not depend on
a timing); a value the user gave in ``XLA_FLAGS`` stands (the form
``flags``). One device and GPUs take ``cores`` and measure nothing. A job of
several processes never measures either: its processes must compile the same
program under the same options (or they wait for ever for each other's
executables), so every one takes rank 0's kept choice for the step, or
``cores``.

This module also times a compiled step (:func:`best_seconds`), for every
form measured on whole steps.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any, Callable, Optional

import jax

from .choice import Choice

FLAG = "xla_cpu_multi_thread_eigen"  # XLA's own switch; given per compiled step, so nothing process-wide changes
_OPTIONS: dict[str, dict[str, bool]] = {"cores": {}, "one": {FLAG: False}}


class Threads(Choice):
    """The threads' choice: the user's ``XLA_FLAGS`` and a run of one thread decide before the pin."""

    def pinned(self) -> Optional[str]:
        pin = super().pinned()  # checked even where the flags or one thread decide
        if FLAG in os.environ.get("XLA_FLAGS", ""):
            return "flags"  # the user's flag stands: no option of ours
        if os.environ.get("OMP_NUM_THREADS", "").strip() == "1":
            return "one"
        return pin

    def note(self) -> str:
        form = self.pinned()
        if form == "flags":
            return f"as XLA_FLAGS says ({FLAG})"
        if form == "one" and super().pinned() != "one":
            return "one per operation (OMP_NUM_THREADS=1, as --threads 1 and each of 2 workers on 2 cores set it)"
        return super().note()


THREADS = Threads("MULTIDEV_JAX_THREADS", ("cores", "one"), "threads.json", unmeasured="cores", in_job="cores",
                  when="per step on 2+ devices at a run's first step",
                  labels={"cores": "every core per operation", "one": "one per operation"})


def options(form: str) -> dict[str, bool]:
    """XLA's compile options of a form (none for ``cores`` and ``flags``)."""
    return _OPTIONS.get(form, {})


def _devices(args: tuple[Any, ...]) -> list[jax.Device]:
    arrays = [a for a in jax.tree.leaves(args) if isinstance(a, jax.Array)]
    return sorted(arrays[0].sharding.device_set, key=lambda d: d.id) if arrays else []


def _fresh(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A copy of every array, placed alike: the step gives some of its arguments' buffers to its results.

    ``device_put`` copies without compiling anything (``jnp.copy`` would
    compile a program per shape, and count as compilation-cache hits).
    """
    def copy(a: Any) -> Any:
        return jax.device_put(a, a.sharding, donate=False, may_alias=False) if isinstance(a, jax.Array) else a
    return jax.tree.map(copy, args)


def best_seconds(compiled: Callable[..., Any], args: tuple[Any, ...], repeats: int, budget: float = 5.0) -> float:
    """The best of ``repeats`` runs after an untimed one (it allocates); fewer where the step is long."""
    times: list[float] = []
    while len(times) < repeats + 1 and not (len(times) >= 2 and sum(times) > budget):
        copy = jax.block_until_ready(_fresh(args))
        start = time.perf_counter()
        jax.block_until_ready(compiled(*copy))
        times.append(time.perf_counter() - start)
    return min(times[1:])


def compile(lowered: jax.stages.Lowered, name: str, args: tuple[Any, ...], form: Optional[str],
            repeats: int = 3) -> jax.stages.Compiled:
    """``lowered`` compiled in ``form``, or (None) in the form this CPU runs this program fastest."""
    if form is not None:
        return lowered.compile(options(form))
    devices = _devices(args)
    if len(devices) < 2 or devices[0].platform != "cpu":
        return lowered.compile(options(THREADS.unmeasured))
    # the program and the flags XLA compiles it under (a choice made under other flags is another one)
    program = f"{lowered.as_text()}\n{os.environ.get('XLA_FLAGS', '')}"
    key = f"{name}:{len(devices)}:{hashlib.sha256(program.encode()).hexdigest()[:16]}"
    if jax.process_count() > 1:  # never measured in a job: rank 0's kept choice, or the default, for all
        return lowered.compile(options(THREADS.agreed(key)))
    compiled: dict[str, jax.stages.Compiled] = {}  # the forms compiled to be timed

    def timer(form: str) -> Callable[[], float]:
        def seconds() -> float:
            compiled[form] = lowered.compile(options(form))
            return best_seconds(compiled[form], args, repeats)
        return seconds
    chosen = THREADS.fastest(key, {form: timer(form) for form in THREADS.forms})
    return compiled[chosen] if chosen in compiled else lowered.compile(options(chosen))
