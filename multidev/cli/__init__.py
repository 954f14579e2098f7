"""The ``multidev`` command line: ``train``, ``compare`` and ``backends``, each taking the flags that apply."""

from multidev.cli.commands import main

__all__ = ["main"]
