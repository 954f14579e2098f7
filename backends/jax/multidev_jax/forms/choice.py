"""A choice: one measured form of the engine, with its pin, its forms, its kept measurements and its note.

Every measured form of the engine has the same shape. A variable pins it
(:meth:`Choice.pinned`, refused in one line where it names no form); where
nothing is measured (GPUs, one device, a model without the operation) it is
:attr:`Choice.unmeasured`; a job's processes take rank 0's kept form, or
:attr:`Choice.in_job` where rank 0 kept none (:meth:`Choice.agreed`: a form
changes the compiled program or its options, and processes compiling
different ones wait for ever for each other's executables,
:mod:`..shared_compile`); anything else is timed once per key and kept
(:meth:`Choice.fastest`) in a JSON file beside the compilation cache, whose
folder is per CPU kind (:mod:`..compile_cache`), so that a choice made on an
Intel Xeon is never read on an AMD EPYC. With the cache off a choice lives in
its process only. :meth:`Choice.note` is what ``multidev backends`` says.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Optional

import jax

from multidev.engine import KeptChoices, pinned_form

from .. import compile_cache
from . import shipped as table

#: rank 0 reaches the same step's compilation at about the same time, and may measure a BatchNorm shape first (a
#: few seconds each for ResNet-18's): 5 minutes, as long as JAX's runtime waits for a missing peer
AGREE_WAIT_MS = 300_000

#: a decision as :meth:`Choice.chosen` made it: (the choice's name, its key, the network's traits, the form)
Decision = tuple[str, str, tuple[str, ...], str]
_recordings: list[list[Decision]] = []  # the recordings open (:func:`recording`)


class Kept(KeptChoices):
    """One file of choices beside the compilation cache (or in ``folder``), and the job's agreement on them."""

    def __init__(self, filename: str, forms: Iterable[str],
                 folder: Callable[[], Optional[Path]] = compile_cache.folder) -> None:
        super().__init__(filename, forms, folder)
        self._agreed: dict[str, str] = {}

    def agreed(self, key: str, default: str, measure: Optional[Callable[[], str]] = None) -> str:
        """In a job of several processes: rank 0's kept form (or ``default``), the same for every process.

        With ``measure``, rank 0 measures a form it has not kept while the
        others wait for its answer; without a key-value store every process
        takes ``default``.

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
                form = self.get(key) or (measure() if measure else default)
                try:
                    client.key_value_set(name, form)
                except jax.errors.JaxRuntimeError:  # published by this process before (forget() since)
                    pass
            else:
                form = client.blocking_key_value_get(name, AGREE_WAIT_MS)
            self._agreed[remembered] = form
        return self._agreed[remembered]

    def forget(self) -> None:
        super().forget()
        self._agreed.clear()


class Choice:
    """One measured form: ``env`` pins one of ``forms``; measurements are kept in ``kept`` (``filename``).

    ``unmeasured``: the form where nothing is measured; ``in_job``: a job's
    form where rank 0 kept none; ``when``: when it is measured, as the note
    says it; ``labels``: how the note names each form.
    """

    def __init__(self, env: str, forms: tuple[str, ...], filename: str, *, unmeasured: str, in_job: str, when: str,
                 labels: Optional[Mapping[str, str]] = None) -> None:
        self.env, self.forms, self.filename = env, forms, filename
        self.unmeasured, self.in_job, self.when, self.labels = unmeasured, in_job, when, labels
        self.kept = Kept(filename, forms)  # this process's store: loaded from the file, and what it measured

    @property
    def name(self) -> str:
        """The choice's name in the shipped table (:mod:`.shipped`): its file's, ``sums`` of ``sums.json``."""
        return self.filename.rsplit(".", 1)[0]

    def pinned(self) -> Optional[str]:
        """The form the environment fixes, or None: measure (or take what was measured)."""
        return pinned_form(self.env, self.forms)

    def shipped(self, traits: frozenset[str] = frozenset()) -> str:
        """The form shipped for this CPU kind and a network of ``traits`` (:mod:`.shipped`), else
        :attr:`unmeasured`."""
        return table.shipped(self.name, traits) or self.unmeasured

    def chosen(self, key: str, measure: Callable[[], str], traits: frozenset[str] = frozenset()) -> str:
        """The kept form for ``key``, else ``measure()`` (which keeps its answer) where runs measure, else the
        shipped one (nothing timed)."""
        form = self._settled(key, traits)
        if form is None:
            form = measure()
        for decisions in _recordings:
            decisions.append((self.name, key, tuple(sorted(traits)), form))
        return form

    def still(self, key: str, traits: Iterable[str], form: str) -> bool:
        """Whether :meth:`chosen` would take ``form`` for ``key`` now, without measuring anything."""
        return self._settled(key, frozenset(traits)) == form

    def _settled(self, key: str, traits: frozenset[str]) -> Optional[str]:
        """The kept form for ``key``, else the shipped one where runs do not measure; None: a run measures it."""
        kept = self.kept.get(key)
        if kept is not None:
            return kept
        return None if table.measuring() else self.shipped(traits)

    def fastest(self, key: str, timers: Mapping[str, Callable[[], float]],
                traits: frozenset[str] = frozenset()) -> str:
        """:meth:`chosen`, measured as the faster of ``timers``."""
        return self.chosen(key, lambda: self.kept.fastest(key, timers), traits)

    def agreed(self, key: str, measure: Optional[Callable[[], str]] = None, default: Optional[str] = None) -> str:
        """A job's form for ``key``: rank 0's kept one (measured by it with ``measure`` where runs measure), else
        ``default``, else rank 0's shipped one (:attr:`in_job` where runs measure)."""
        if not table.measuring():
            return self.kept.agreed(key, default or self.shipped())
        return self.kept.agreed(key, default or self.in_job, measure)

    def keeping(self, folder: Callable[[], Optional[Path]]) -> Kept:
        """Keep measurements in ``folder`` from now on, measuring afresh (a test's own); the store given up is
        returned, to be given back with :meth:`restore`."""
        old, self.kept = self.kept, Kept(self.filename, self.forms, folder)
        return old

    def restore(self, kept: Kept) -> None:
        """Keep measurements in ``kept`` again (what :meth:`keeping` gave up)."""
        self.kept = kept

    def note(self) -> str:
        """What ``multidev backends`` says of this form: the pin, or what was measured and where it is kept."""
        form = self.pinned()
        if form is not None:
            return f"{self.label(form)} ({self.env}={form})"
        if table.measuring():
            return self.kept.summary(self.when, self.env, self.labels)
        kind, _ = table.kind_table(table.this_cpu_kind())
        note = (f"{self.label(self.shipped())}{table.trait_note(self.name)}, shipped for {kind} ({table.ENV}=measure "
                f"times the forms on this CPU)")
        if any(self.kept.counts().values()):  # an earlier measuring run's choices, taken first where they hold
            note += f"; taken first where kept: {self.kept.summary(self.when, self.env, self.labels)}"
        return note

    def label(self, form: str) -> str:
        return self.labels[form] if self.labels and form in self.labels else form


@contextmanager
def recording() -> Iterator[list[Decision]]:
    """The decisions every choice makes inside the block (a step's trace and compilation: what its program rests
    on besides its key)."""
    decisions: list[Decision] = []
    _recordings.append(decisions)
    try:
        yield decisions
    finally:
        _recordings.remove(decisions)
