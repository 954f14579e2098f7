"""Replicas written to the earlier protocol, adapted so that a third-party engine keeps working for one release.

That protocol had one ``train_step(batch, lr, *, update=True, pending=False)``
whose two flags changed what it did and what it returned. Today's splits it:
``train_step`` and ``accumulate`` (engines that claim ``accumulate``), and
``queue_step`` and ``queue_accumulate`` (engines that claim ``pending_stats``).
The adapter answers today's calls with the old one, with a DeprecationWarning
(which pytest shows an engine's author when the kit builds its replicas).
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

#: the release after which replicas with the flags are refused instead of adapted
UNTIL = "0.2"


def is_legacy(replicas: Any) -> bool:
    """Whether ``replicas.train_step`` still takes the earlier ``update=`` flag."""
    step = getattr(replicas, "train_step", None)
    if step is None or hasattr(replicas, "accumulate") or hasattr(replicas, "queue_step"):
        return False
    try:
        return "update" in inspect.signature(step).parameters
    except (TypeError, ValueError):
        return False


class LegacyReplicas:
    """Today's step methods over an engine's ``train_step(batch, lr, *, update=, pending=)``; the rest passed on."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def train_step(self, batch: Any, lr: float) -> Any:
        return self._inner.train_step(batch, lr)

    def accumulate(self, batch: Any) -> Any:
        return self._inner.train_step(batch, 0.0, update=False)

    def queue_step(self, batch: Any, lr: float) -> Any:
        return self._inner.train_step(batch, lr, pending=True)

    def queue_accumulate(self, batch: Any) -> Any:
        return self._inner.train_step(batch, 0.0, update=False, pending=True)


def adapted(replicas: Any) -> Any:
    """``replicas`` as today's protocol has them: themselves, or wrapped (with a warning) where written to the old."""
    if not is_legacy(replicas):
        return replicas
    kind = type(replicas)
    warnings.warn(f"{kind.__module__}.{kind.__qualname__}.train_step takes update=/pending= flags: split it into "
                  f"train_step(batch, lr) and accumulate(batch) (and queue_step / queue_accumulate where the "
                  f"engine claims pending_stats); multidev {UNTIL} refuses the flags (docs/writing-a-backend.md)",
                  DeprecationWarning, stacklevel=3)
    return LegacyReplicas(replicas)
