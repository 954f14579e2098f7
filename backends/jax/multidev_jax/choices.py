"""Choices measured on this CPU, kept in a JSON file beside the compilation cache so later runs need not measure.

The cache folder is per CPU kind (:mod:`.compile_cache`), so a choice made on
an Intel Xeon is never read on an AMD EPYC. With the cache off a choice lives
in its process only. The processes of a job take rank 0's choices
(:meth:`Kept.agreed`): a form changes the compiled program or its options,
and processes compiling different ones wait for ever for each other's
executables (:mod:`.shared_compile`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

import jax

from . import compile_cache

AGREE_WAIT_MS = 120_000  # rank 0 reaches the same step's compilation at about the same time


class Kept:
    """One file of choices (key -> form), read once per process and written whole after each new choice."""

    def __init__(self, filename: str, forms: Iterable[str]) -> None:
        self.filename = filename
        self.forms = tuple(forms)
        self.chosen: dict[str, str] = {}
        self._loaded = False
        self._agreed: dict[str, str] = {}
        self.measured: list[str] = []  # keys this process measured (tests)

    def path(self) -> Optional[Path]:
        folder = compile_cache.folder()
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
            temporary.write_text(json.dumps({**self._read(), **self.chosen}, indent=1, sort_keys=True))
            os.replace(temporary, path)  # whole or not at all: runs of other processes read it
        except OSError:
            pass  # a read-only cache: the choice lives in this process only

    def fastest(self, key: str, timers: Mapping[str, Callable[[], float]]) -> str:
        """The kept form for ``key``, else the form whose timer gives the fewest seconds, kept for later runs."""
        chosen = self.get(key)
        if chosen is None:
            seconds = {form: timers[form]() for form in self.forms}
            chosen = min(seconds, key=seconds.__getitem__)
            self.put(key, chosen)
            self.measured.append(key)
        return chosen

    def agreed(self, key: str, default: str) -> str:
        """In a job of several processes: rank 0's kept form (or ``default``), the same for every process.

        Remembered per job (its key-value store): a later job of the same
        processes, under Ray Train say, agrees afresh with its own rank 0.
        """
        try:
            from jax._src.distributed import global_state
            client = global_state.client
        except ImportError:  # another JAX: no store to agree through, so every process takes the default
            return default
        if client is None:
            return default
        name = f"multidev/{self.filename}/{key}"
        remembered = f"{id(client)}/{name}"
        if remembered not in self._agreed:
            if jax.process_index() == 0:
                form = self.get(key) or default
                try:
                    client.key_value_set(name, form)
                except jax.errors.JaxRuntimeError:  # published by this process before (forget() since)
                    pass
            else:
                form = client.blocking_key_value_get(name, AGREE_WAIT_MS)
            self._agreed[remembered] = form
        return self._agreed[remembered]

    def counts(self) -> dict[str, int]:
        self._load()
        return {form: sum(v == form for v in self.chosen.values()) for form in self.forms}

    def where(self) -> str:
        return str(self.path() or "this process only: the compilation cache is off")

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
        self._agreed.clear()
        self._loaded = False
