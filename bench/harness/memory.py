"""A process's resident memory, read from the kernel (/proc/self/status), now and sampled while it works."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def status() -> dict[str, int]:
    """VmRSS (now), VmHWM (the peak so far), RssAnon, RssFile, RssShmem of this process, in KiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in KEYS:
                out[key] = int(value.split()[0])
    return out


def mib(key: str) -> float:
    """One of :data:`KEYS` of this process, in MiB."""
    return status()[key] / 1024


@contextlib.contextmanager
def sampling(every: float = 0.02) -> Iterator[dict[str, int]]:
    """The highest VmRSS, RssAnon and RssFile seen (KiB), read every ``every`` seconds on a thread."""
    peak, stop = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}, threading.Event()

    def take() -> None:
        now = status()
        for key, value in peak.items():
            peak[key] = max(value, now[key])

    def run() -> None:
        while not stop.is_set():
            take()
            stop.wait(every)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
        take()
