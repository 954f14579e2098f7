"""A setting: one dataclass field that knows its default, check, flag, help and whether ranks must agree on it.

``setting(...)`` returns a ``dataclasses.field`` whose metadata is a
:class:`Flag`; :mod:`multidev.settings.run` declares every setting of a run
with it, and the command line, the argv of workers and of ``compare``'s
runs, and the agreement check between ranks all read the fields from there.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

#: the commands a run setting can belong to
COMMANDS = ("train", "compare")


@dataclass(frozen=True)
class Flag:
    """How one setting is checked, shown on the command line and shared with the workers of a job."""

    name: str = ""                      # the field's name, filled in by ``fields()``
    flag: Optional[str] = None          # e.g. "--batch-size"; None: Python only
    help: str = ""
    #: raises a MultidevError of one line for a bad value, or returns it in canonical form (None: as it is)
    check: Optional[Callable[[Any], Any]] = None
    #: argparse's type for the flag's text (int, float, str)
    type: Optional[Callable[[str], Any]] = None
    choices: Optional[Sequence[str]] = None
    #: the value as the flag's text, for argv (default: str)
    text: Callable[[Any], str] = str
    #: every rank of a job must have been started with the same value ("presence": the same None or not None)
    agree: bool | str = True
    commands: tuple[str, ...] = COMMANDS
    #: where the command line's default differs from the API's (progress bars: on in a terminal); None: the same
    cli_default: Any = None
    #: a group of flags of which one at most may be given (``--devices`` / ``--gpus``)
    exclusive: Optional[str] = None
    group: Optional[str] = None         # the --help section


def setting(default: Any, flag: Optional[str] = None, help: str = "", **options: Any) -> Any:
    """A field of a run's settings (see :class:`Flag` for the options)."""
    return dataclasses.field(default=default, metadata={"flag": Flag(flag=flag, help=help, **options)})


def fields(cls: type) -> list[tuple[dataclasses.Field, Flag]]:
    """Every setting of ``cls`` in declaration order, each with its :class:`Flag` (its name filled in)."""
    return [(f, dataclasses.replace(f.metadata["flag"], name=f.name)) for f in dataclasses.fields(cls)
            if "flag" in f.metadata]


def cli_default(f: dataclasses.Field, meta: Flag) -> Any:
    return f.default if meta.cli_default is None else meta.cli_default


def add_arguments(parser: argparse.ArgumentParser, cls: type, command: str) -> None:
    """``cls``'s flags that belong to ``command``, in sections, with their defaults and help."""
    sections: dict[Optional[str], Any] = {None: parser}
    exclusive: dict[str, Any] = {}
    for f, meta in fields(cls):
        if meta.flag is None or command not in meta.commands:
            continue
        if meta.group not in sections:
            sections[meta.group] = parser.add_argument_group(meta.group)
        target = sections[meta.group]
        if meta.exclusive is not None:
            if meta.exclusive not in exclusive:
                exclusive[meta.exclusive] = target.add_mutually_exclusive_group()
            target = exclusive[meta.exclusive]
        default = cli_default(f, meta)
        if isinstance(f.default, bool):
            # a switch turns the command line's default around: --tf32 (off by default), --no-prefetch (on)
            target.add_argument(meta.flag, dest=meta.name, action="store_false" if default else "store_true",
                                help=meta.help)
        else:
            target.add_argument(meta.flag, dest=meta.name, default=default, type=meta.type, choices=meta.choices,
                                help=meta.help)


def argv(value: Any, cls: type, command: str = "train") -> list[str]:
    """The flags that give ``command`` the settings ``value``: those that differ from the command line's default."""
    args: list[str] = []
    for f, meta in fields(cls):
        if meta.flag is None or command not in meta.commands:
            continue
        v, default = getattr(value, f.name), cli_default(f, meta)
        if v == default:
            continue
        if isinstance(f.default, bool):
            args.append(meta.flag)
        elif v is not None:
            args += [meta.flag, meta.text(v)]
    return args
