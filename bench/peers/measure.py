"""What every contender of the model table measures in its own process, alike: the data, the first step, the rate."""

from __future__ import annotations

import statistics
from typing import Any, Callable

import numpy as np

from bench import harness
from bench.peers.nets import CLASSES


def synthetic(batch: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The one batch every contender trains on, NCHW float32 and int64 labels: seeded, so the same in every process."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (batch, 3, size, size)).astype(np.float32)
    return x, rng.integers(0, CLASSES, batch).astype(np.int64)


def nhwc(x: np.ndarray) -> np.ndarray:
    """Channels last, for Flax and Keras, made once before timing."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def measure(step: Callable[[], Any], finish: Callable[[], None], *, batch: int, warmup: int, steps: int,
            repeats: int) -> dict[str, float]:
    """The first step's seconds since this process started (imports, building, compiling and the step), then the
    median samples/s of ``repeats`` windows of ``steps`` steps after ``warmup`` steps in all (the first among them).

    ``finish`` waits for whatever ``step`` left running (a queued step, an asynchronous dispatch)."""
    step()
    finish()
    first = harness.since_start()
    for _ in range(warmup - 1):
        step()
    finish()
    rates = [harness.samples_per_sec(step, batch, steps, finish) for _ in range(repeats)]
    return {"first_step_s": first, "samples_per_sec": statistics.median(rates)}


def compute_device(gpu: bool) -> str:
    """Where a contender computes: "gpu" or "cpu", as JAX names the platform (MXNet and torch map it)."""
    return "gpu" if gpu else "cpu"


def checked(params: int, expected: int, who: str) -> int:
    """``params``, or an error naming both counts: a hand-written network must be multidev's architecture."""
    if params != expected:
        raise AssertionError(f"{who} has {params:,} parameters, multidev's network {expected:,}: not the same "
                             f"architecture")
    return params
