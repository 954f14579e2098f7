"""A CPU device's parts: its shard whole on one JAX device, or cut into one part per core, chosen by measurement.

XLA:CPU runs each operation on every core, and the small operations of a
ResNet step on a few dozen images keep several cores busy poorly: on an
Intel Xeon with 2 cores, 2 devices trained 1.19-1.24 times as fast as one.
A device can run that way too: its shard cut into one part per core, each
part on a JAX virtual device of its own, BatchNorm summing its statistics
over the device's parts (so they are still its shard's) and the gradients
summed over every part. That is the same computation, rounded otherwise (as
k devices with sync BatchNorm are one device). Whether it is faster depends
on the CPU, so the first time a run places a batch, the engine times a train
step each way (on copies of the state: the run itself is untouched) and keeps
the faster in ``parts.json`` beside the compilation cache (per CPU kind,
keyed by devices, parts, shard length and the recipe); ``multidev backends``
counts the choices.

A device is split only in a run of one process on CPU devices where the
cores this process may use are at least twice the devices, into no more
parts than JAX has virtual devices (``MULTIDEV_JAX_CPU_DEVICES``). A job's
processes never split (a worker usually has a core of its own), nor does a
run limited to one thread (``OMP_NUM_THREADS=1``).
``MULTIDEV_JAX_PARTS=whole`` or ``split`` pins a form (the test suite pins
``whole``, so that its results do not depend on a timing).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Optional

import jax

from .choice import Choice


class Parts(Choice):
    """The parts' choice: a run of one thread never splits, whatever the pin."""

    def pinned(self) -> Optional[str]:
        pin = super().pinned()  # checked even where one thread decides
        if os.environ.get("OMP_NUM_THREADS", "").strip() == "1":
            return "whole"
        return pin

    def note(self) -> str:
        form = self.pinned()
        if form == "whole" and os.environ.get("OMP_NUM_THREADS", "").strip() == "1":
            return "whole: one JAX device each (OMP_NUM_THREADS=1)"
        if form == "split":
            return f"split where a run can: one part per core where the cores are at least twice the devices " \
                   f"({self.env}=split)"
        return super().note()


PARTS = Parts("MULTIDEV_JAX_PARTS", ("whole", "split"), "parts.json", unmeasured="whole", in_job="whole",
              when="at a run's first batch where the cores are at least twice the devices (whole, or split in one "
                   "part per core)")


def _affinity() -> int:
    """The cores this process may run on (a launcher may give it fewer than the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores() -> int:
    """The cores a run may split over: its affinity's, at most ``--threads`` (which sets ``OMP_NUM_THREADS``)."""
    threads = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(_affinity(), int(threads)) if threads.isdigit() and int(threads) > 0 else _affinity()


def split_parts(devices: list[jax.Device], processes: int, available: int) -> int:
    """The parts each device runs on when split: one per core, or 1 where a split is not possible."""
    if processes > 1 or PARTS.pinned() == "whole" or any(d.platform != "cpu" for d in devices):
        return 1
    parts = min(cores(), available) // len(devices)  # no more parts than JAX has virtual devices
    return parts if parts >= 2 else 1


def settled(split: int) -> Optional[int]:
    """A device's parts where nothing is timed (no split possible, or a pin), else None: time them."""
    pin = PARTS.pinned()
    if split == 1 or pin is not None:
        return split if pin == "split" else 1
    return None


def key(devices: int, parts: int, length: int, recipe: tuple[Any, ...]) -> str:
    """What a choice holds for: the devices, their parts, the shard length, the cores, the recipe, the pins and JAX's
    CPU device count (XLA sizes its thread pools by it)."""
    pins = [os.environ.get(name, "") for name in ("XLA_FLAGS", "MULTIDEV_JAX_THREADS", "MULTIDEV_JAX_SUMS")]
    text = f"{recipe!r}\n{pins}\n{cores()}\n{len(jax.local_devices(backend='cpu'))}\n{jax.__version__}"
    return f"{devices}:{parts}:{length}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
