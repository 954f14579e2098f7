"""Contenders timed in alternating rounds, and their medians.

The machines here are shared and noisy: a comparison runs every contender
once per round, in turn, and keeps each one's median, so that load from
other processes falls on all of them alike.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Mapping, TypeVar

T = TypeVar("T")


def rounds(contenders: Mapping[str, Callable[[], T]], count: int) -> dict[str, list[T]]:
    """What each contender returned, ``count`` rounds of every contender in turn."""
    runs: dict[str, list[T]] = {name: [] for name in contenders}
    for _ in range(count):
        for name, run in contenders.items():
            runs[name].append(run())
    return runs


def medians(runs: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in runs.items()}


def samples_per_sec(step: Callable[[], object], batch: int, steps: int,
                    sync: Callable[[], None] = lambda: None) -> float:
    """Samples a second over ``steps`` calls of ``step``, ``sync`` waiting for the device at both ends."""
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return batch * steps / (time.perf_counter() - start)


def compare(contenders: Mapping[str, Callable[[], object]], *, batch: int, steps: int, repeats: int,
            warmup: int = 1, sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Median samples/s of steps of each contender in this process: ``warmup`` untimed steps each, then
    ``repeats`` alternating rounds of ``steps`` steps."""
    for step in contenders.values():
        for _ in range(warmup):
            step()
    timed = {name: (lambda step=step: samples_per_sec(step, batch, steps, sync)) for name, step in contenders.items()}
    return medians(rounds(timed, repeats))
