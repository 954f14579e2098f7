"""Device names shared by every engine (contract: Devices).

A device is ``kind:index``. ``gpus=k`` asks for accelerators and falls back to
k virtual CPU devices with one warning; ``devices=k`` or a list names them.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from multidev.errors import MultidevError

KINDS = ("cpu", "gpu")


_NAME = re.compile(r"^(cpu|gpu):(\d+)$")


DeviceSpec = Union[int, str, "Device", Sequence[Union[str, "Device"]], None]


class DeviceFallbackWarning(UserWarning):
    """Fewer accelerators than asked for: the run uses virtual CPU devices."""


@dataclass(frozen=True, order=True)
class Device:
    kind: str
    index: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise MultidevError(f"unknown device kind {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.index < 0:
            raise MultidevError(f"device index must be >= 0, got {self.index}")

    @classmethod
    def parse(cls, name: Union[str, "Device"]) -> "Device":
        if isinstance(name, Device):
            return name
        match = _NAME.match(str(name).strip().lower())
        if not match:
            raise MultidevError(f"bad device name {name!r}: write kind:index, e.g. cpu:0 or gpu:1")
        return cls(match.group(1), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.kind}:{self.index}"


def _count(value: object, what: str) -> int:
    try:
        count = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MultidevError(f"{what} must be a whole number, got {value!r}") from None
    if isinstance(value, bool) or (count != value and not isinstance(value, str)):
        raise MultidevError(f"{what} must be a whole number, got {value!r}")
    if count < 1:
        raise MultidevError(f"{what} must be at least 1, got {count}: ask for one device or more")
    return count


def canonical_request(gpus: object = None, devices: DeviceSpec = None) -> tuple[Optional[int], DeviceSpec]:
    """``(gpus, devices)`` as a run's settings keep them: a count, or a tuple of device names; checked.

    What depends on the engine (how many GPUs it sees) is left to :func:`resolve_devices`.
    """
    if gpus is not None and devices is not None:
        raise MultidevError("give either gpus or devices, not both")
    if gpus is not None:
        return _count(gpus, "gpus"), None
    if devices is None:
        return None, None
    if isinstance(devices, (int, float)) or (isinstance(devices, str) and devices.strip().lstrip("-").isdigit()):
        return None, _count(devices, "devices")
    names = devices.split(",") if isinstance(devices, str) else devices
    if isinstance(names, Device):
        names = [names]
    try:
        chosen = [Device.parse(n) for n in names]  # type: ignore[union-attr]
    except TypeError:
        raise MultidevError(f"devices must be a count or device names, got {devices!r}") from None
    if not chosen:
        raise MultidevError("devices is empty: name at least one, e.g. cpu:0")
    return None, tuple(str(d) for d in chosen)


def cpu_devices_wanted(gpus: object = None, devices: DeviceSpec = None) -> int:
    """The most virtual CPU devices a request can name: ``devices=k``, the highest ``cpu:i`` + 1, or ``gpus=k``
    falling back to CPU devices (1 for no request)."""
    gpus, devices = canonical_request(gpus, devices)
    if gpus is not None:
        return gpus
    if devices is None:
        return 1
    if isinstance(devices, int):
        return devices
    cpus = [d for d in map(Device.parse, devices) if d.kind == "cpu"]  # type: ignore[arg-type]
    return max((d.index for d in cpus), default=0) + 1


def resolve_devices(*, gpus: object = None, devices: DeviceSpec = None, gpu_count: int = 0,
                    max_cpu: int | None = None, first_gpu: int = 0,
                    cpu_note: Callable[[], str] | None = None) -> list[Device]:
    """Turn the user's request into concrete device names.

    ``gpu_count`` is what the engine can see; ``max_cpu`` is how many virtual
    CPU devices the engine can offer (None: as many as asked), ``cpu_note``
    what the engine says of that number (where it came from, what changes it),
    asked only when a request exceeds it.
    ``first_gpu`` is this process's place among the processes of its machine:
    ``gpus=k`` then takes GPUs ``first_gpu * k`` to ``first_gpu * k + k - 1``.
    """
    gpus, devices = canonical_request(gpus, devices)
    if gpus is not None:
        k = gpus
        if gpu_count >= (first_gpu + 1) * k:
            chosen = [Device("gpu", first_gpu * k + i) for i in range(k)]
        else:
            warnings.warn(f"asked for {k} GPU(s) but {gpu_count} available: "
                          f"using {k} virtual CPU devices instead", DeviceFallbackWarning, stacklevel=3)
            chosen = [Device("cpu", i) for i in range(k)]
    elif devices is None:
        chosen = [Device("cpu", 0)]
    elif isinstance(devices, int):
        chosen = [Device("cpu", i) for i in range(devices)]
    else:
        chosen = [Device.parse(n) for n in devices]  # type: ignore[union-attr]
    if len(set(chosen)) != len(chosen):
        raise MultidevError(f"devices repeat a name: {', '.join(map(str, chosen))}")
    gpus_named = [d for d in chosen if d.kind == "gpu"]
    if gpus_named and max(d.index for d in gpus_named) >= gpu_count:
        raise MultidevError(f"{gpus_named[-1]} asked for but this engine sees {gpu_count} GPU(s): "
                            f"use --gpus to fall back to CPU devices, or name fewer")
    cpus = [d for d in chosen if d.kind == "cpu"]
    if cpus and max_cpu is not None and max(d.index for d in cpus) >= max_cpu:
        note = cpu_note() if cpu_note else ""
        why = f" (its CPU devices: {note})" if note else " (`multidev backends` shows the limit)"
        raise MultidevError(f"{len(cpus)} CPU devices asked for but this engine offers {max_cpu} "
                            f"in this process{why}: ask for fewer")
    return chosen
