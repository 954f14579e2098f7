"""Evaluation (contract: Evaluation): every test sample counted once, on every device of every process."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from multidev.data import batches
from multidev.engines.protocol import Replicas
from multidev.processes.job import Job
from multidev.rules.split import shard_sizes


def evaluate(replicas: Replicas, x: np.ndarray, y: np.ndarray, batch_size: int,
             weights: Optional[Sequence[float]] = None, job: Job = Job()) -> tuple[float, float, int]:
    """(mean loss, accuracy, samples counted) over a whole set, in parallel on every device of every process."""
    k = len(replicas.setup.devices)
    sums = np.zeros(3)
    for idx in batches(np.arange(len(x)), batch_size):
        sizes = shard_sizes(len(idx), k * job.group.size, weights)
        stats = replicas.evaluate(replicas.place(job.shards(x, y, idx, sizes, k)))
        sums += (stats.loss_sum, stats.correct, stats.count)
    loss, correct, total = job.all_sum(sums)  # each process counted its own rows
    total = int(round(total))
    if total != len(x):  # contract: Evaluation: an engine that drops or repeats samples is broken, not the user
        raise RuntimeError(f"evaluation counted {total} samples, the set has {len(x)}")
    return loss / max(total, 1), correct / max(total, 1), total
