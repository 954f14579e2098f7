"""Large copies between NumPy and the first CPU context go through MXNet's worker, not the calling thread."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from multidev_mxnet import transfers
from multidev_mxnet.runtime import mxnet

mx = mxnet()
nd = mx.nd

LARGE = transfers.PARALLEL_SIZE + 7


@pytest.mark.parametrize("size", [5, LARGE], ids=["small", "large"])
def test_values_cross_both_ways_unchanged(size):
    x = np.random.default_rng(0).normal(size=(size,)).astype(np.float32)
    placed = transfers.to_device(x, mx.cpu(0), np.float32)
    x[:] = 0  # the caller's array is its own again at once
    back = transfers.to_host(placed * 1)
    assert back.flags.writeable and back.dtype == np.float32
    np.testing.assert_array_equal(back, np.random.default_rng(0).normal(size=(size,)).astype(np.float32))
    dest = nd.zeros((size,))
    transfers.write(dest, back[::-1].copy())
    other = nd.zeros((size,))
    transfers.copy_into(dest, other)
    np.testing.assert_array_equal(other.asnumpy(), back[::-1])


def _threads_started(copy: str) -> int:
    """Threads a fresh process gains from one large round trip through ``copy``, its worker's team made first."""
    script = textwrap.dedent(f"""
        import os, numpy as np
        from multidev_mxnet import transfers
        from multidev_mxnet.runtime import mxnet
        mx = mxnet()
        threads = lambda: len(os.listdir("/proc/self/task"))
        mx.nd.ones(({LARGE},)).sum().wait_to_read()
        start, x = threads(), np.ones({LARGE}, np.float32)
        if "{copy}" == "transfers":
            transfers.to_host(transfers.to_device(x, mx.cpu(0), np.float32))
        else:
            mx.nd.array(x).asnumpy()
        print(threads() - start)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def test_a_large_copy_starts_no_openmp_team_on_the_calling_thread():
    """MXNet's own copy makes the calling thread an OpenMP master, with a worker thread of its own; then libgomp
    manages more threads than cores and every team sleeps between operators."""
    plain = _threads_started("mxnet")
    if not plain:
        pytest.skip("this MXNet copies without an OpenMP team on the calling thread")
    ours = _threads_started("transfers")
    assert ours == 0, f"to_device and to_host started {ours} thread(s); MXNet's own copies started {plain}"
