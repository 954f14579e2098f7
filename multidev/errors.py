"""User-facing errors: one line that says what is wrong and what to do (contract: Errors)."""

from __future__ import annotations

from typing import Optional


class MultidevError(Exception):
    """A mistake the user can fix; the command line prints it as one line, no traceback."""


class PeerLost(MultidevError):
    """This worker's job lost another process; its launcher names which, and may start the job again."""


class UserCodeError(MultidevError):
    """The user's own code (a model file) raised: one line naming the file and line, exit code 1 as Python's own.

    Unlike multidev's checks, which every process of a job makes alike, the
    user's code may fail in one process alone (a full disk, a rank's own
    file): that worker ends at once, as after any error of its own.
    """


class BackendNotInstalled(MultidevError):
    """The engine is known but its package (or its framework) is missing."""


def first_line(exc: BaseException, default: Optional[str] = None) -> str:
    """The first line of ``exc``'s message, for a one-line error; ``default`` (else the type's name) if it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else (default or type(exc).__name__)
