"""One process per device (or per few) on JAX's own runtime: ``jax.distributed`` and one global mesh.

JAX connects processes (``jax.distributed.initialize``, a coordinator on
machine 0, gloo for the CPU collectives) but starts none, so the workers are
started and watched by the core's launcher (``multidev.engine.spawn``). The
mesh then spans every process's devices (``devices.job_devices``), and the
steps' ``psum`` runs across processes exactly as across the devices of one.

``launch``, ``join``, ``leave`` and ``all_sum`` are the four every engine's
distributed.py defines, with the same signatures (the backend forwards to
them through ``multidev.engine.MultiProcess``).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional, Sequence

import jax
import numpy as np

from multidev.engine import HostSum, Launch, MultidevError, PeerLost, ProcessGroup, Restart, first_line, spawn

from . import shared_compile
from .devices import configure_cpu_devices

#: seconds before JAX's survivors of a dead process give up (100 by default); the launcher usually ends them first
HEARTBEAT_SECONDS = 10
#: what XLA's gloo collectives say when the process at the other end is gone
_GONE = ("gloo/transport", "Connection reset by peer", "Connection closed by peer")


@contextlib.contextmanager
def peers() -> Iterator[None]:
    """A collective that fails because another process is gone is one line, not a traceback (as torch's)."""
    try:
        yield
    except Exception as exc:
        if jax.process_count() < 2 or not any(gone in str(exc) for gone in _GONE):
            raise
        raise PeerLost(f"rank {jax.process_index()} lost the job ({first_line(exc)[:160]}): another process "
                       f"ended; the launcher says which") from None


def launch(argv: Sequence[str], launch: Launch) -> list[Restart]:
    """``python -m multidev <argv>`` as ``launch.processes`` workers on this machine, by the core's launcher."""
    return spawn(argv, launch)


def join(group: ProcessGroup, local_rank: int) -> None:
    """Connect to the job's coordinator (``MASTER_ADDR``:``MASTER_PORT``); each process offers its own devices."""
    configure_cpu_devices()  # before JAX starts: each process offers its own virtual CPU devices
    address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '29500')}"
    try:
        jax.distributed.initialize(coordinator_address=address, num_processes=group.size, process_id=group.rank,
                                   heartbeat_timeout_seconds=HEARTBEAT_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the coordinator's many ways to fail: one line each
        raise MultidevError(f"rank {group.rank} could not join the job at {address}: {first_line(exc)[:200]}") from None
    shared_compile.share(group.rank, group.size)


def leave() -> None:
    try:
        jax.distributed.shutdown()
    except Exception:  # noqa: BLE001 - a job whose peer is gone cannot shut down cleanly; the process ends anyway
        pass


def all_sum(values: np.ndarray) -> np.ndarray:
    """``values`` summed over every process of the job, float64."""
    from jax.experimental import multihost_utils
    with peers():
        return np.asarray(multihost_utils.process_allgather(np.asarray(values, np.float64)), np.float64).sum(axis=0)


def barrier() -> None:
    """Every process of the job past this point (a collective of JAX's runtime: a lost peer fails it)."""
    from jax.experimental import multihost_utils
    with peers():
        multihost_utils.sync_global_devices("multidev: barrier")


def host_sum(numel: int, dtype: np.dtype, group: ProcessGroup) -> Optional[HostSum]:
    """Slots of ``numel`` values in this machine's shared memory for the steps to add up (a collective), or None.

    CPU jobs whose processes are all on this machine only (multidev.processes.hostsum); GPUs sum themselves.
    """
    if jax.devices()[0].platform != "cpu":
        return None
    return HostSum.open(numel, dtype, group, barrier, all_sum, sets=2)

