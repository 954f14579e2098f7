"""multidev device names to JAX devices (of this process, or of the whole job), and the virtual CPU devices.

JAX fixes its number of host (CPU) devices when its backend starts, on the
first JAX operation; afterwards the count cannot change in that process. The
engine's setting is ``MULTIDEV_JAX_CPU_DEVICES``. Without it, a run
(``multidev.train``, which plans its devices first) gets the devices it names
and at least one per core it may run on (a device's parts, :mod:`.parts`,
need them), and
anything else :data:`DEFAULT_CPU_DEVICES`. More is not free: XLA:CPU sizes its
thread pools by the device count, so 8 devices on 2 cores run every operation
on 8 threads (AMD EPYC, ResNet-18, one device: 1.27 s a step with 8 devices in
the process, 1.09 s with 1 or 2, 1.21 s with 4). The count is applied when a
run starts (the engine's first call), never at import or when the engine is
created; a count the user already gave JAX (``jax_num_cpu_devices`` or
``XLA_FLAGS``) is kept. If JAX started before, its count stands and
:func:`cpu_devices_note` says so.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from multidev.engine import Device, MultidevError, ProcessGroup, usable_cores

from . import compile_cache

ENV = "MULTIDEV_JAX_CPU_DEVICES"
DEFAULT_CPU_DEVICES = 8
AXIS = "data"  # the mesh axis the batch is split along (a device split into parts: its parts in a row)
_XLA_FLAG = "xla_force_host_platform_device_count"


def requested_cpu_devices(planned: Optional[int] = None) -> Optional[int]:
    """The CPU device count to give JAX, or None to leave JAX's own setting alone.

    ``planned``: the most devices the run will name (None: no run planned them).
    """
    value = os.environ.get(ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise MultidevError(f"{ENV}={value!r} is not a whole number >= 1: set it to the CPU devices you need")
        return int(value)
    if jax.config.jax_num_cpu_devices >= 0 or _XLA_FLAG in os.environ.get("XLA_FLAGS", ""):
        return None  # the user configured JAX directly
    return default_cpu_devices(planned)


def default_cpu_devices(planned: Optional[int]) -> int:
    """A planned run's devices, at least one per core it may run on; :data:`DEFAULT_CPU_DEVICES` without a plan.

    One per core even at one thread (a job's worker): a worker with one device rounded its float32 sums otherwise
    than one process of the job's devices (ResNet-18, 2 epochs: 8e-4 apart where the kit allows 1e-4); with the
    count of the process beside it, as before, it does not.
    """
    return DEFAULT_CPU_DEVICES if planned is None else max(planned, usable_cores())


_applied: dict[str, int] = {}  # "set": the count this engine gave JAX; "late": the one it came too late for
_planned: dict[str, int] = {}  # "count": what the run planned, where it did


def configure_cpu_devices(planned: Optional[int] = None) -> None:
    """Set JAX's CPU device count if its backend has not started (and its compilation cache); a no-op afterwards.

    ``planned``: the most CPU devices the run will name (the engine's ``plan_cpu_devices``).
    """
    compile_cache.configure()
    if _applied:
        return
    wanted = requested_cpu_devices(planned)
    if wanted is None:
        return
    try:
        jax.config.update("jax_num_cpu_devices", wanted)
        _applied["set"] = wanted
        if planned is not None:
            _planned["count"] = planned
    except RuntimeError:  # JAX already started: its count stands and max_cpu_devices() reports it
        _applied["late"] = wanted


def cpu_devices_note() -> str:
    """How many CPU devices JAX has, where the number came from, and whether it can still change."""
    have = len(cpu_devices())
    if "late" in _applied and have != _applied["late"]:
        return (f"{have}: JAX started before the engine could set {_applied['late']} ({ENV}); "
                f"the count is fixed once JAX starts, so set {ENV} before anything uses JAX")
    if "set" not in _applied:
        source = "JAX's own setting, kept"
    elif os.environ.get(ENV, "").strip():
        source = f"from {ENV}"
    elif "count" in _planned:
        source = (f"the first run's {_planned['count']}, at least one per core; {ENV} set before JAX starts "
                  "gives another")
    else:
        source = f"the default for a run that planned none; {ENV} changes it"
    return f"{have} ({source}; fixed once JAX starts)"


def cpu_devices() -> list[jax.Device]:
    return jax.devices("cpu")


def gpu_devices() -> list[jax.Device]:
    """Accelerators of the default backend (JAX calls CUDA and ROCm devices ``gpu``)."""
    return [d for d in jax.devices() if d.platform in ("gpu", "cuda", "rocm")]


def jax_devices(devices: Sequence[Device]) -> list[jax.Device]:
    """The JAX device behind each multidev name, or a one-line error saying what to do."""
    kinds = {d.kind for d in devices}
    if len(kinds) != 1:
        raise MultidevError("the jax engine runs one mesh on one kind of device: name only cpu or only gpu devices")
    kind = kinds.pop()
    available = cpu_devices() if kind == "cpu" else gpu_devices()
    wanted = max(d.index for d in devices) + 1
    if wanted > len(available):
        if kind == "gpu":
            raise MultidevError(f"gpu:{wanted - 1} asked for but JAX sees {len(available)} GPU(s): name fewer, "
                                f"or use --gpus to fall back to CPU devices")
        raise MultidevError(f"cpu:{wanted - 1} asked for but JAX started with {len(available)} CPU device(s) "
                            f"in this process: set {ENV}={wanted} before JAX starts (e.g. in the shell), "
                            f"or ask for fewer")
    return [available[d.index] for d in devices]


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


def with_parts(named: Sequence[jax.Device], parts: int) -> tuple[jax.Device, ...]:
    """Each named device followed by ``parts - 1`` virtual CPU devices nobody named: device-major, as :func:`mesh`."""
    spares = iter(d for d in cpu_devices() if d not in named)
    return tuple(d for device in named for d in (device, *(next(spares) for _ in range(parts - 1))))


@lru_cache(maxsize=None)
def mesh(devices: tuple[jax.Device, ...]) -> Mesh:
    """A one-axis mesh: the batch is split along :data:`AXIS`, parameters are replicated."""
    return Mesh(np.array(devices, dtype=object), (AXIS,))
