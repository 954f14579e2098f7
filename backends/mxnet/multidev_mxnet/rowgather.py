"""A sharded job's rows crossing its processes through this machine's shared memory, as MXNet arrays.

Each process writes its devices' rows into the gradient sum's shared total
and copies the other owners' rows out of it (``multidev.processes.rowgather``),
where a sum over the processes would add each process's rows placed in zeros.
MXNet reads and writes the total in place (a ``from_numpy`` view).
"""

from __future__ import annotations

from typing import Callable, Union

import numpy as np

from multidev.engine import RowGather

from .runtime import mxnet
from .transfers import copy_into

mx = mxnet()

nd = mx.nd

#: device i's rows of array j (``rows(i, j)``), on its context or on the host
Rows = Callable[[int, int], Union[mx.nd.NDArray, np.ndarray]]


class HostRows:
    """This process's side of the gather: its devices' rows in, every owner's rows out."""

    def __init__(self, gather: RowGather) -> None:
        self.gather = gather
        self._array = nd.from_numpy(gather.array().view(), zero_copy=True)  # the view turns read-only, not the sum

    def put(self, rows: Rows) -> None:
        """This process's rows written where every rank reads them (a collective: every rank puts alike)."""
        self.gather.start()
        flat = self.gather.array()
        for j, i, lo, hi in self.gather.mine():
            part = rows(i, j)
            if isinstance(part, np.ndarray):
                flat[lo:hi] = part.reshape(-1)
            else:
                copy_into(part.reshape((-1,)), self._array[lo:hi])
        self._array.wait_to_read()
        self.gather.finish()

    def copy_out(self, j: int, into: mx.nd.NDArray, skip: int = -1) -> None:
        """Array j's rows from the shared total into ``into``, its whole; job device ``skip``'s left as they are.
        Wait on ``into`` before the next sum or gather (its rows are read from the total until then)."""
        shape = self.gather.shapes[j]
        for device, (a, b) in enumerate(self.gather.rows[j]):
            if b > a and device != skip:
                lo, hi = self.gather.span(j, device)
                copy_into(self._array[lo:hi].reshape((b - a, *shape[1:])), into[a:b])
