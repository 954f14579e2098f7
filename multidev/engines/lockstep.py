"""Per-device threads that meet at every sync BatchNorm, for engines that hold replicas themselves.

An engine whose framework has no collective for replicas in one process
(torch on CPU, MXNet contexts) runs each device's forward pass in its own
thread; at every BatchNorm the threads swap their shards' (mean, variance,
count) through :class:`AllGather` and each combines them with
:func:`combine_moments`. Framework-free: values are whatever the engine
hands in (tensors stay on their devices, autograd history included).
"""

from __future__ import annotations

import functools
import operator
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Hashable, Sequence, TypeVar

T = TypeVar("T")


R = TypeVar("R")


class AllGather:
    """``parties`` threads each hand in a value per round and get every party's, in rank order.

    Rounds are counted per rank, so a party calls in the same order as the
    others (one call per BatchNorm layer). When one thread fails, :meth:`abort`
    releases the others with ``threading.BrokenBarrierError`` instead of
    leaving them waiting.
    """

    def __init__(self, parties: int, timeout: float = 600.0) -> None:
        self.parties = parties
        self._barrier = threading.Barrier(parties, timeout=timeout)
        self._slots: dict[tuple[int, int], Any] = {}
        self._rounds = [0] * parties

    def abort(self) -> None:
        self._barrier.abort()

    def __call__(self, rank: int, value: Any) -> list[Any]:
        call = self._rounds[rank]
        self._rounds[rank] += 1
        self._slots[(call, rank)] = value
        self._barrier.wait()
        return [self._slots[(call, r)] for r in range(self.parties)]


def combine_moments(parts: Sequence[tuple[T, T, int]], move: Callable[[T], T] = lambda a: a,
                    add: Callable[[list[T]], T] = lambda xs: functools.reduce(operator.add, xs)) -> tuple[T, T]:
    """Whole-batch (mean, biased variance) from each shard's (mean, biased variance, count).

    Weighted by count, so uneven shards are exact: the mean of the means and
    the mean of (variance + squared distance of the shard mean). ``move``
    brings another device's value here; ``add`` sums a list (a framework's
    n-ary add is one operation instead of n - 1).
    """
    total = sum(count for _, _, count in parts)
    means = [move(m) for m, _, _ in parts]
    mean = add([m * (count / total) for m, (_, _, count) in zip(means, parts)])
    var = add([(move(v) + (m - mean) ** 2) * (count / total) for m, (_, v, count) in zip(means, parts)])
    return mean, var


def run_lockstep(fn: Callable[[Hashable], R], items: Sequence[Hashable], gather: AllGather) -> dict[Hashable, R]:
    """``fn(item)`` for every item, each in its own thread; a failing thread aborts ``gather`` for the rest."""
    def run(item: Hashable) -> R:
        try:
            return fn(item)
        except BaseException:
            gather.abort()
            raise

    with ThreadPoolExecutor(len(items)) as pool:
        return dict(zip(items, pool.map(run, items)))
