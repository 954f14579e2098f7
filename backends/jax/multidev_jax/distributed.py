"""One process per device (or per few) on JAX's own runtime: ``jax.distributed`` and one global mesh.

JAX connects processes (``jax.distributed.initialize``, a coordinator on
machine 0, gloo for the CPU collectives) but starts none, so the workers are
started and watched by the core's launcher (``multidev.spawn``). The mesh
then spans every process's devices, and the steps' ``psum`` runs across
processes exactly as across the devices of one.
"""

from __future__ import annotations

import os
from typing import Sequence

import jax
import numpy as np

from multidev.engine import Device, Launch, MultidevError, ProcessGroup, spawn

from .devices import configure_cpu_devices, jax_devices

#: seconds before JAX's survivors of a dead process give up (100 by default); the launcher usually ends them first
HEARTBEAT_SECONDS = 10


def launch(argv: Sequence[str], launch: Launch) -> None:
    spawn(argv, launch)


def join(group: ProcessGroup) -> None:
    configure_cpu_devices()  # before JAX starts: each process offers its own virtual CPU devices
    address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '29500')}"
    try:
        jax.distributed.initialize(coordinator_address=address, num_processes=group.size, process_id=group.rank,
                                   heartbeat_timeout_seconds=HEARTBEAT_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the coordinator's many ways to fail: one line each
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MultidevError(f"rank {group.rank} could not join the job at {address}: {first[:200]}") from None


def leave() -> None:
    try:
        jax.distributed.shutdown()
    except Exception:  # noqa: BLE001 - a job whose peer is gone cannot shut down cleanly; the process ends anyway
        pass


def all_sum(values: np.ndarray) -> np.ndarray:
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(np.asarray(values, np.float64)), np.float64).sum(axis=0)


def job_devices(devices: Sequence[Device], group: ProcessGroup) -> list[jax.Device]:
    """Every process's devices of these names, rank-major: the mesh of the whole job."""
    if group.size == 1:
        return jax_devices(devices)
    jax_devices(devices)  # this process's names exist (one-line error otherwise)
    kind = "cpu" if devices[0].kind == "cpu" else None
    by_process: dict[int, list[jax.Device]] = {}
    for device in sorted(jax.devices(kind) if kind else jax.devices(), key=lambda d: d.id):
        by_process.setdefault(device.process_index, []).append(device)
    return [by_process[rank][d.index] for rank in range(group.size) for d in devices]
