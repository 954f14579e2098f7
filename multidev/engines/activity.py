"""What an engine is busy with while a step takes long (compiling, timing its forms), for the progress bar.

A first step that compiles and measures can take a minute; a bar that says
only "step 0" meanwhile reads as a hang. An engine wraps such work in
:func:`doing`, and the bar's clock (:mod:`multidev.training.loop`) shows
:func:`current` every second: ``compiling train (12 s)``, or nested,
``timing conv inputs: fused / compiling train (3 s)`` (the outermost and
the innermost where work nests deeper). Any thread may be busy: the latest
to start is the one shown.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

_lock = threading.Lock()
_busy: list[tuple[int, str, float]] = []  # (thread, what, since), outermost first
_clock = time.monotonic


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Say that this thread does ``what`` (a few words: "compiling train") until the block ends."""
    entry = (threading.get_ident(), what, _clock())
    with _lock:
        _busy.append(entry)
    try:
        yield
    finally:
        with _lock:
            _busy.remove(entry)


def current() -> Optional[str]:
    """What the engine does now, outer work first, with the innermost's seconds so far; None when idle."""
    with _lock:
        if not _busy:
            return None
        thread = _busy[-1][0]
        mine = [(what, since) for t, what, since in _busy if t == thread]
    seconds = _clock() - mine[-1][1]
    names = [what for what, _ in mine]
    shown = names if len(names) <= 2 else [names[0], "...", names[-1]]  # a bar's line has room for a few words
    return " / ".join(shown) + (f" ({seconds:.0f} s)" if seconds >= 1 else "")
