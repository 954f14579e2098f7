"""Copies between NumPy and MXNet's first CPU context, made by MXNet's worker rather than the calling thread.

MXNet 1.9.1 copies an array of ``MXNET_CPU_PARALLEL_SIZE`` values or more
(200,000 by default) with OpenMP: ``nd.array`` and ``asnumpy`` on the thread
that asks, ``copyto`` and slice assignment on a thread of the engine's. Every
thread that starts OpenMP work gets a team of its own, and once libgomp
manages more threads than there are cores, every team sleeps between
operators instead of spinning. One such copy left Gluon's own ResNet-50 step
(batch 32, 2 cores) at 247 ms against 190-215, its two threads sleeping
600-750 times a step against 2 (measured on an AMD EPYC Zen 4).

So a large array goes through an operator: ``identity`` from or into a NumPy
array that MXNet wraps without copying (``from_numpy``), run by the worker
that runs the context's other operators. Small arrays and other contexts
(whose own workers hold teams anyway) take MXNet's plain copies. A copy
between two NDArrays of the first CPU is that operator too (:func:`copy_into`).
"""

from __future__ import annotations

import os

import numpy as np

from .runtime import mxnet

mx = mxnet()

nd = mx.nd

#: MXNet's own threshold for copying with OpenMP (read at its start, as MXNet reads it)
PARALLEL_SIZE = int(os.environ.get("MXNET_CPU_PARALLEL_SIZE", "200000"))


def _by_operator(ctx: mx.Context, size: int) -> bool:
    """Whether a copy of ``size`` values to or from ``ctx`` should be an operator: a large one on the first CPU,
    where ``from_numpy``'s arrays live."""
    return size >= PARALLEL_SIZE and ctx == mx.cpu(0)


def _wrapped(x: np.ndarray, dtype: np.dtype) -> mx.nd.NDArray:
    """A copy of ``x`` in ``dtype`` that MXNet reads in place: its own, so nobody writes it while MXNet reads it."""
    return nd.from_numpy(np.array(x, dtype=dtype, order="C"), zero_copy=True)


def to_device(x: np.ndarray, ctx: mx.Context, dtype: np.dtype) -> mx.nd.NDArray:
    """A new NDArray on ``ctx`` holding ``x`` in ``dtype``."""
    if not _by_operator(ctx, x.size):
        return nd.array(x, ctx=ctx, dtype=dtype)
    return nd.identity(_wrapped(x, dtype))


def write(dest: mx.nd.NDArray, x: np.ndarray) -> None:
    """``dest``'s values become ``x``'s (of its shape), queued on ``dest``'s context."""
    value = np.asarray(x).reshape(dest.shape)
    if _by_operator(dest.context, dest.size):
        nd.identity(_wrapped(value, dest.dtype), out=dest)
    else:
        dest[:] = nd.array(value, ctx=dest.context, dtype=dest.dtype)


def copy_into(source: mx.nd.NDArray, dest: mx.nd.NDArray) -> None:
    """``dest``'s values become ``source``'s (same shape), queued: by an operator where both are on the first CPU."""
    if _by_operator(source.context, source.size) and dest.context == source.context:
        nd.identity(source, out=dest)
    else:
        source.copyto(dest)


def to_host(a: mx.nd.NDArray) -> np.ndarray:
    """``a``'s values in a new NumPy array (waits for the operators that write ``a``)."""
    if not _by_operator(a.context, a.size) or a.stype != "default":
        return a.asnumpy()
    out = np.empty(a.shape, dtype=a.dtype)
    view = nd.from_numpy(out.view(), zero_copy=True)  # the view turns read-only; ``out`` stays writable
    nd.identity(a, out=view)
    view.wait_to_read()
    return out
