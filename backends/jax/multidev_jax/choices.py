"""The core's kept choices (``multidev.engines.choices``) in the compilation cache's folder, agreed in a job.

The cache folder is per CPU kind (:mod:`.compile_cache`), so a choice made on
an Intel Xeon is never read on an AMD EPYC. With the cache off a choice lives
in its process only. The processes of a job take rank 0's choices
(:meth:`Kept.agreed`): a form changes the compiled program or its options,
and processes compiling different ones wait for ever for each other's
executables (:mod:`.shared_compile`).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import jax

from multidev.engine import KeptChoices

from . import compile_cache

#: rank 0 reaches the same step's compilation at about the same time, and may measure a BatchNorm shape first (a
#: few seconds each for ResNet-18's): 5 minutes, as long as JAX's runtime waits for a missing peer
AGREE_WAIT_MS = 300_000


class Kept(KeptChoices):
    """One file of choices beside the compilation cache, and the job's agreement on them."""

    def __init__(self, filename: str, forms: Iterable[str]) -> None:
        super().__init__(filename, forms, compile_cache.folder)
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
