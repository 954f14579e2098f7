"""Each device's rows of a job's arrays, gathered whole on every process through this machine's shared memory.

A sharded job (contract: Sharding) cuts each trainable array's rows over its
devices (:func:`multidev.rules.sharding.owned_rows`), and after an update
every process needs every row again. Over any runtime a sum does it, each
process's rows placed in zeros (exact: x + 0 is x), but it writes, adds and
reads the whole arrays. Where the job is on one machine the gradients are
already summed through a shared file (:mod:`.hostsum`), whose total lies
idle between sums: each process writes its devices' rows there, at their
places in the arrays laid end to end, and after a barrier every array is
whole in it, a view to copy from. No zeros, no additions, and no memory
beyond the sum's.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np

from multidev.processes.hostsum import HostSum
from multidev.rules.sharding import owned_rows

Shape = tuple[int, ...]


class RowGather:
    """Where each job device's rows of each array lie in a sum's total, and the barriers around writing them.

    ``host`` sums the same arrays, in the same order (its values are theirs laid end to end); a scalar is
    one row, job device 0's. Every rank gathers at the same moments: :meth:`start`, its rows written into
    :meth:`array`, :meth:`finish`, then the wholes read (:meth:`whole`) before the next sum or gather starts.
    """

    def __init__(self, host: HostSum, shapes: Sequence[Shape], devices_per_process: int) -> None:
        self.host, self.shapes, self.k = host, [tuple(s) for s in shapes], devices_per_process
        job = devices_per_process * host.group.size
        #: per array, per job device: its ``[a, b)`` rows and their ``[lo, hi)`` in the arrays laid end to end
        self.rows: list[list[tuple[int, int]]] = []
        self._spans: list[list[tuple[int, int]]] = []
        self._starts: list[int] = []
        offset = 0
        for shape in self.shapes:
            rows, size = (shape[0], math.prod(shape[1:])) if shape else (1, 1)
            self.rows.append(owned_rows(rows, job))
            self._spans.append([(offset + a * size, offset + b * size) for a, b in self.rows[-1]])
            self._starts.append(offset)
            offset += rows * size
        if offset != host.numel:
            raise ValueError(f"the arrays hold {offset} values, the shared sum {host.numel}")

    @property
    def base(self) -> int:
        """This process's first device in the job: its devices are ``base`` to ``base + k - 1``."""
        return self.host.group.rank * self.k

    def mine(self) -> Iterator[tuple[int, int, int, int]]:
        """``(j, i, lo, hi)`` for each array j and each of this process's devices i that owns rows of it: where
        those rows go in :meth:`array`."""
        for j in range(len(self.shapes)):
            for i in range(self.k):
                lo, hi = self.span(j, self.base + i)
                if hi > lo:
                    yield j, i, lo, hi

    def array(self) -> np.ndarray:
        """Where each rank writes its devices' rows, at their :meth:`span`, between :meth:`start` and :meth:`finish`."""
        return self.host.sum_view()

    def span(self, j: int, device: int) -> tuple[int, int]:
        """``[lo, hi)`` of job device ``device``'s rows of array ``j`` in :meth:`array`."""
        return self._spans[j][device]

    def start(self) -> None:
        """Wait until every rank has read what the array held (the last sum's total, or the last gather)."""
        self.host.barrier()

    def finish(self) -> None:
        """Wait until every rank has written its rows: every array is whole in :meth:`array` until the next sum."""
        self.host.barrier()

    def whole(self, j: int) -> np.ndarray:
        """Array ``j`` whole, a view of :meth:`array` (copy it before the next sum or gather)."""
        start = self._starts[j]
        return self.array()[start:start + math.prod(self.shapes[j])].reshape(self.shapes[j])
