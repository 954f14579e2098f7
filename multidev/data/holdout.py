"""The seeded test set held out of training samples, class by class, the one rule of every reader.

Each class gives its share of the held-out part and keeps at least one sample
in training, so a small or uneven set never trains without a class it is then
tested on. scikit-learn's ``train_test_split(stratify=)`` refuses exactly those
sets (fewer held-out samples than classes, a class of one sample), hence the
few lines here. The split is a function of the labels, the fraction and the
seed alone: a folder of images and the same pixels as arrays hold out the
same samples.
"""

from __future__ import annotations

import numpy as np

from multidev.errors import MultidevError


def _shares(counts: np.ndarray, n_test: int, rng: np.random.Generator) -> np.ndarray:
    """How many samples each class holds out: its proportional share, rounded down, then one more for the
    classes holding out none first and the largest remainders next (seeded ties), never a class's last one."""
    quota = n_test * counts / counts.sum()
    take = np.minimum(np.floor(quota).astype(np.int64), counts - 1)
    while (left := n_test - int(take.sum())) > 0:
        order = np.lexsort((rng.random(len(counts)), take - quota, take > 0))
        order = order[take[order] < counts[order] - 1][:left]
        take[order] += 1
    return take


def stratified(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, test rows), sorted: a seeded ``fraction`` of the rows held out, each class its share."""
    if not 0 < fraction < 1:
        raise MultidevError(f"the test fraction must be in (0, 1), got {fraction!r}")
    labels = np.asarray(labels)
    rows = len(labels)
    n_test = max(1, int(round(fraction * rows)))
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if n_test >= rows or rows == len(counts):
        of = f" of {len(counts)} classes" if len(counts) > 1 else ""
        raise MultidevError(f"{rows} training samples{of} cannot spare a test set and keep every class in training: "
                            f"give test samples or more data")
    rng = np.random.default_rng(seed)
    take = _shares(counts, min(n_test, rows - len(counts)), rng)
    test = np.concatenate([rng.permutation(np.flatnonzero(inverse == c))[:k] for c, k in enumerate(take)])
    return np.setdiff1d(np.arange(rows), test), np.sort(test)
