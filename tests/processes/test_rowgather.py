"""A sharded job's rows gathered through the gradient sum's shared total: every rank reads every array whole."""

import mmap

import numpy as np
import pytest

from multidev import ProcessGroup
from multidev.processes.hostsum import HostSum, _stride
from multidev.processes.rowgather import RowGather
from multidev.rules.sharding import owned_rows

SHAPES = [(6, 3, 2, 2), (10,), (), (1, 4), (5, 7)]  # rows that cut evenly, unevenly, a scalar, one row


def _numel(shapes) -> int:
    return sum(int(np.prod(s)) for s in shapes)


def _ranks(size: int, k: int, barrier=lambda: None) -> list[RowGather]:
    """``size`` ranks' gathers over one mapping, in this process (the calls' order is the barrier)."""
    numel = _numel(SHAPES)
    buffer = mmap.mmap(-1, (size + 1) * _stride(numel) * 8)
    return [RowGather(HostSum(buffer, numel, np.dtype(np.float64), ProcessGroup(r, size), barrier), SHAPES, k)
            for r in range(size)]


def _owned(shape, device: int, devices: int) -> tuple[int, int]:
    return owned_rows(shape[0] if shape else 1, devices)[device]


@pytest.mark.parametrize("size, k", [(2, 1), (2, 2), (3, 1)])
def test_every_rank_reads_every_array_whole_after_each_sum(size, k):
    ranks = _ranks(size, k)
    for step in range(3):  # a sum's total in between: a gather must not see it, nor the last gather's rows
        ranks[0].array()[:] = np.nan
        arrays = [np.random.default_rng(10 * step + j).normal(size=s) for j, s in enumerate(SHAPES)]
        for gather in ranks:  # each rank writes only its devices' rows, where mine() says
            for j, i, lo, hi in gather.mine():
                array = arrays[j]
                a, b = _owned(array.shape, gather.host.group.rank * k + i, size * k)
                rows = array if array.ndim else array.reshape(1)  # a scalar: one row, device 0's
                gather.array()[lo:hi] = rows[a:b].reshape(-1)
        for gather in ranks:
            for j, array in enumerate(arrays):
                np.testing.assert_array_equal(gather.whole(j), array)
                assert np.shares_memory(gather.whole(j), gather.array())


def test_each_rank_waits_before_writing_and_before_reading():
    waits = []
    gather = _ranks(2, 1, barrier=lambda: waits.append("barrier"))[0]
    gather.start()
    gather.finish()
    assert waits == ["barrier", "barrier"]


def test_a_sum_of_other_arrays_is_refused():
    host = _ranks(2, 1)[0].host
    with pytest.raises(ValueError, match="hold 4 values"):
        RowGather(host, [(4,)], 1)
