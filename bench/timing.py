"""Timing helpers shared by the benchmarks: interleaved repeats, medians, ratios.

These machines are shared and noisy, so every comparison runs both sides in
one process, alternating, and reports the median of each and their ratio.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def samples_per_sec(step: Callable[[], None], batch: int, steps: int, sync: Callable[[], None] = lambda: None) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return batch * steps / (time.perf_counter() - start)


def compare(contenders: dict[str, Callable[[], None]], *, batch: int, steps: int, repeats: int, warmup: int = 1,
            sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Median samples/s of each contender, measured in turn ``repeats`` times after ``warmup`` steps."""
    for step in contenders.values():
        for _ in range(warmup):
            step()
    sync()
    runs: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, step in contenders.items():
            runs[name].append(samples_per_sec(step, batch, steps, sync))
    return {name: statistics.median(values) for name, values in runs.items()}


def table(rows: list[dict[str, object]]) -> str:
    """A Markdown table from dicts with the same keys."""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |"
              for r in rows]
    return "\n".join(lines)
