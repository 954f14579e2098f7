"""User-facing errors: one line that says what is wrong and what to do (contract: Errors)."""

from __future__ import annotations


class MultidevError(Exception):
    """A mistake the user can fix; the command line prints it as one line, no traceback."""


class BackendNotInstalled(MultidevError):
    """The engine is known but its package (or its framework) is missing."""
