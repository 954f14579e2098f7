"""The docs' settings and command-line references, written from the fields and the parser themselves.

``python -m multidev.settings.reference`` (re)writes ``docs/reference/settings.md``
and ``docs/reference/cli.md``; a test fails when the committed pages differ
from what this writes, so a new or changed setting cannot leave the docs
behind. The pages are tables built from argparse's actions rather than its
``--help`` text, whose wrapping changes with the terminal and Python's version.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from multidev.cli.parser import parser
from multidev.settings import fields as _fields
from multidev.settings.run import Settings

#: the pages this writes, relative to the repository
SETTINGS_PAGE = "docs/reference/settings.md"
CLI_PAGE = "docs/reference/cli.md"
GENERATED = "<!-- written by `python -m multidev.settings.reference` from {source}: edit that, not this page -->"


def _cell(text: str) -> str:
    """Text for a table cell: a pipe would end the cell, an angle bracket start HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: Any) -> str:
    """Code in a table cell; a pipe in it as HTML, the one form GitHub and Python-Markdown both read in a table."""
    text = str(value)
    if "|" in text:
        return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"
    return f"`{text}`"


def _linked(text: str) -> str:
    """``docs/page.md`` named in a help text as a link from ``docs/reference/``."""
    return re.sub(r"docs/([\w/.-]+\.md)", lambda m: f"[{m.group(1)}](../{m.group(1)})", text)


def _section(group: Optional[str], default: str) -> list[str]:
    """A heading from an argparse group's title: "recipe (docs/contract.md: Optimizers)" is its name and a pointer."""
    title, _, note = (group or default).partition(" (")
    lines = [f"## {title[:1].upper()}{title[1:]}", ""]
    if note:
        lines += [f"See {_linked(note.rstrip(')'))}.", ""]
    return lines


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows), ""]


def _setting_row(f: Any, meta: _fields.Flag) -> list[str]:
    default = _code(repr(f.default))
    if meta.cli_default is not None:
        default += f" (command line: {_code(repr(meta.cli_default))})"
    if meta.flag is None:
        flag = "none: Python only"
    else:
        flag = _code(meta.flag) + (" (train only)" if tuple(meta.commands) == ("train",) else "")
    return [_code(f.name), _code(f.type), default, flag, _cell(meta.help)]


def settings_page() -> str:
    """``docs/reference/settings.md``: every field of ``Settings``, in sections as ``--help`` has them."""
    lines = ["# Settings", "", GENERATED.format(source="multidev/settings/run.py"), "",
             "A run's settings are one typed, frozen value, `multidev.Settings`, checked when it is made.",
             "`multidev.train(**kwargs)` takes these fields as keyword arguments and `multidev train` as flags;",
             "`settings.replace(**changes)` makes a changed copy, checked again.", ""]
    groups: dict[Optional[str], list[list[str]]] = {}
    for f, meta in _fields.fields(Settings):
        groups.setdefault(meta.group, []).append(_setting_row(f, meta))
    for group, rows in groups.items():
        lines += _section(group, "the run")
        lines += _table(["setting", "type", "default", "flag", "meaning"], rows)
    lines += _agreement()
    return "\n".join(lines)


def _agreement() -> list[str]:
    free = [f"`{meta.name}`" for _, meta in _fields.fields(Settings) if not meta.agree]
    presence = [f"`{meta.name}`" for _, meta in _fields.fields(Settings) if meta.agree == "presence"]
    return ["## Between the processes of a job", "",
            "Every process of a job must be started with the same settings, except these, which may differ: "
            f"{', '.join(free)}. Of {', '.join(presence)}, every process must give one or none.", ""]


def _switch(action: argparse.Action) -> bool:
    return action.nargs == 0


def _value(action: argparse.Action) -> str:
    if _switch(action):
        return "none: a switch"
    if not action.option_strings:
        return ""
    if action.choices is not None:
        return " or ".join(_code(c) for c in action.choices)
    return _code(action.metavar or action.dest.upper())


def _default(action: argparse.Action, texts: dict[str, Any]) -> str:
    """The value a command takes when the flag is not given, as its text on the command line."""
    if action.required:
        return "required"
    if _switch(action) or action.default is None or action.default == argparse.SUPPRESS:
        return ""
    text = texts.get(action.dest, str)(action.default)
    return _code(text) if text else ""


def _flag_row(action: argparse.Action, exclusive: dict[int, list[str]], texts: dict[str, Any]) -> list[str]:
    names = ", ".join(_code(o) for o in action.option_strings) or _code(action.dest)
    meaning = _cell(action.help or "")
    others = [o for o in exclusive.get(id(action), []) if o not in action.option_strings]
    if others:
        meaning += f" (not with {', '.join(_code(o) for o in others)})"
    return [names, _value(action), _default(action, texts), meaning]


def _command_page(name: str, command: argparse.ArgumentParser, summary: str) -> list[str]:
    lines = [f"## multidev {name}", "", f"{summary[:1].upper()}{summary[1:]}.", ""]
    texts = {meta.name: meta.text for _, meta in _fields.fields(Settings)}
    exclusive: dict[int, list[str]] = {}
    for group in command._mutually_exclusive_groups:  # argparse has no public view of its groups
        flags = [o for a in group._group_actions for o in a.option_strings]
        exclusive.update({id(a): flags for a in group._group_actions})
    for group in command._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS and a.dest != "help"]
        if not actions:
            continue
        title = {"positional arguments": "arguments", "options": "options",
                 "optional arguments": "options"}.get(group.title or "", group.title)
        lines += ["#" + line if line.startswith("## ") else line for line in _section(title, "options")]
        lines += _table(["flag", "value", "default", "meaning"], (_flag_row(a, exclusive, texts) for a in actions))
    return lines


def cli_page() -> str:
    """``docs/reference/cli.md``: every command of ``multidev`` with its flags, from the parser itself."""
    top = parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    lines = ["# Command line", "", GENERATED.format(source="multidev/cli/parser.py and multidev/settings/run.py"), "",
             f"`multidev`: {top.description} Every command takes `-h` / `--help`; a flag's default is the",
             "command line's (the run's settings are the same as `multidev.train`'s: see [settings](settings.md)).", ""]
    lines += _table(["command", "what it does"], ([f"[`{n}`](#multidev-{n})", _cell(helps[n])] for n in sub.choices))
    for name, command in sub.choices.items():
        lines += _command_page(name, command, helps[name])
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """Each generated page's text by its path in the repository."""
    return {SETTINGS_PAGE: settings_page(), CLI_PAGE: cli_page()}


def main(argv: Optional[list[str]] = None) -> int:
    args = argparse.ArgumentParser(prog="python -m multidev.settings.reference", description=__doc__.split("\n")[0])
    args.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                      help="the repository to write into (default: the one this module is in)")
    args.add_argument("--check", action="store_true", help="write nothing: exit 1 when a page differs (for CI)")
    options = args.parse_args(argv)
    if not (options.root / "docs").is_dir():
        print(f"multidev: error: {options.root} has no docs/ folder: give the repository with --root", file=sys.stderr)
        return 2
    stale = []
    for path, text in pages().items():
        target = options.root / path
        changed = not target.exists() or target.read_text() != text
        if changed and options.check:
            stale.append(path)
            continue
        if changed:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        print(f"{'wrote' if changed else 'unchanged'} {path}")
    for path in stale:
        print(f"{path} differs from the settings and the parser: run `python -m multidev.settings.reference`",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
