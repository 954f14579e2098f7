"""Forms an engine chose by timing them on this CPU, kept in a JSON file per CPU kind so later runs need not time.

The fastest form of a computation depends on the CPU (the JAX engine's
BatchNorm sums: 10-15 times faster as matrix-vector products on an Intel
Xeon, slower on an AMD EPYC), so an engine times the forms once and keeps
the winner. The file lives in a folder named after the CPU (:func:`cpu_tag`),
so a choice made on one kind of CPU is never read on another; with no folder
a choice lives in its process only.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from multidev.engines.activity import doing
from multidev.errors import MultidevError


@lru_cache(maxsize=1)
def cpu_tag() -> str:
    """This CPU's vendor, model and feature flags, hashed: what is kept for one CPU is kept apart from another's."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        keep = [ln for ln in lines if ln.split(":")[0].strip() in ("vendor_id", "model name", "flags", "Features")]
        text = "\n".join(dict.fromkeys(keep))
    except OSError:
        text = platform.processor()
    return f"{platform.machine()}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def pinned_form(env: str, forms: Iterable[str]) -> Optional[str]:
    """The form the variable ``env`` pins, or None where it is unset (the engine's own choice: kept, shipped or
    measured).

    A value that names no form is refused in one line rather than ignored: a
    misspelt pin would otherwise leave the engine choosing while its user
    believes the form fixed.
    """
    value = os.environ.get(env, "").strip().lower()
    if not value:
        return None
    forms = tuple(forms)
    if value not in forms:
        raise MultidevError(f"{env}={value!r} names no form: give one of {', '.join(forms)}, or unset it for the "
                            "engine's own choice")
    return value


def cache_home() -> Path:
    """``~/.cache/multidev`` (``$XDG_CACHE_HOME`` respected): where engines keep what they measured or compiled."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "multidev"


class Kept:
    """One file of choices (key -> form), read once per process and written whole after each new choice.

    ``folder`` gives the folder of this CPU kind's file, or None to keep choices in this process only.
    """

    def __init__(self, filename: str, forms: Iterable[str], folder: Callable[[], Optional[Path]]) -> None:
        self.filename = filename
        self.forms = tuple(forms)
        self.chosen: dict[str, str] = {}
        self._folder = folder
        self._loaded = False
        self.measured: list[str] = []  # keys this process measured (tests)

    def path(self) -> Optional[Path]:
        folder = self._folder()
        return folder / self.filename if folder else None

    def _read(self) -> dict[str, str]:
        path = self.path()
        try:
            saved = json.loads(path.read_text()) if path and path.exists() else {}
        except (OSError, ValueError):  # unreadable: measure again
            return {}
        return {k: v for k, v in saved.items() if v in self.forms} if isinstance(saved, dict) else {}

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            self.chosen.update(self._read())

    def get(self, key: str) -> Optional[str]:
        self._load()
        return self.chosen.get(key)

    def put(self, key: str, form: str) -> None:
        self.chosen[key] = form
        path = self.path()
        if path is None:
            return
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps({**self._read(), **self.chosen}, indent=1, sort_keys=True))
            os.replace(temporary, path)  # whole or not at all: runs of other processes read it
        except OSError:
            pass  # a read-only cache: the choice lives in this process only

    def fastest(self, key: str, timers: Mapping[str, Callable[[], float]]) -> str:
        """The kept form for ``key``, else the form whose timer gives the fewest seconds, kept for later runs."""
        chosen = self.get(key)
        if chosen is None:
            what = self.filename.rsplit(".", 1)[0].replace("_", " ")
            seconds = {}
            for form in self.forms:
                with doing(f"timing {what}: {form}"):
                    seconds[form] = timers[form]()
            chosen = min(seconds, key=seconds.__getitem__)
            self.put(key, chosen)
            self.measured.append(key)
        return chosen

    def counts(self) -> dict[str, int]:
        self._load()
        return {form: sum(v == form for v in self.chosen.values()) for form in self.forms}

    def where(self) -> str:
        return str(self.path() or "this process only: the cache is off")

    def summary(self, when: str, env: str, labels: Optional[Mapping[str, str]] = None) -> str:
        """What ``multidev backends`` says of these choices: when they are measured, and how many took each form
        (each named by ``labels``, else by itself)."""
        counts, labels = self.counts(), labels or {form: form for form in self.forms}
        if not any(counts.values()):
            return f"measured on this CPU {when}, kept in {self.where()}"
        chosen = ", ".join(f"{labels[form]} for {counts[form]}" for form in self.forms)
        return f"measured on this CPU {when}: {chosen} ({self.where()}; {env}={'|'.join(self.forms)} pins one)"

    def forget(self) -> None:
        """Read the file afresh at the next question (tests)."""
        self.chosen.clear()
        self._loaded = False
