"""The next minibatch is read, cut and placed while the current step runs (contract: Input pipeline).

One background thread from the standard library's executor, a bounded
number of items ahead, results in order: a step never waits for the host to
prepare its batch, memory holds at most ``depth`` placed batches more, and an
error in preparing one surfaces in the training loop as it would without it.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


R = TypeVar("R")


#: placed minibatches kept ready: one is enough to hide the host's work behind a step
DEPTH = 1


def ahead(prepare: Callable[[T], R], items: Iterable[T], depth: int = DEPTH) -> Iterator[R]:
    """``prepare(item)`` for every item, in order, up to ``depth`` items ahead of the consumer (0: inline)."""
    if depth < 1:
        yield from map(prepare, items)
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="multidev-prefetch")
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(prepare, item))
            if len(pending) > depth:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:  # the consumer stopped early (an interruption, an error): drop what was not started
        pool.shutdown(wait=True, cancel_futures=True)
