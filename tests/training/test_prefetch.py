"""The input pipeline (contract: Input pipeline): the next micro-batch prepared ahead, in order, errors in the loop."""

import threading

import pytest

from multidev.training.prefetch import ahead


def test_prefetch_keeps_order_runs_ahead_and_raises_in_the_loop():
    seen = []

    def prepare(i):
        seen.append((i, threading.current_thread().name))
        if i == 5:
            raise ValueError("bad batch 5")
        return i * 10

    got = []
    with pytest.raises(ValueError, match="bad batch 5"):
        for value in ahead(prepare, range(8)):
            got.append(value)
    assert got == [0, 10, 20, 30, 40]
    assert all(name.startswith("multidev-prefetch") for _, name in seen)
    assert list(ahead(lambda i: i + 1, range(4), depth=0)) == [1, 2, 3, 4]
