"""A benchmark's result: its rows printed as a Markdown table and kept as JSON with the machine's facts.

A run writes ``<results>/<kind>/<script>.json``, ``kind`` the machine's
(``amd-epyc-zen3``, ``intel-xeon-amx``, ``nvidia-h100`` for a GPU run), so
each kind of machine keeps the latest figures of every script, and
``python -m bench.summary`` turns the folder into docs/design/benchmarks.md.
The file holds the commit, the date, the machine's facts, the settings the
script ran with (its command line's options), a line saying what was run,
the rows, and notes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Optional

from bench.harness import machine


def cell(value: Any) -> str:
    """A number as a table shows it: whole from 100, one decimal from 10, two from 0.1, three digits below."""
    if isinstance(value, bool) or not isinstance(value, float):
        return "" if value is None else " ".join(str(value).split()).replace("|", "\\|")
    if value != value:  # NaN
        return ""
    size = abs(value)
    return f"{value:.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else f"{value:.2f}" if size >= 0.1 \
        else f"{value:.3g}"


def table(rows: list[Mapping[str, Any]]) -> str:
    """A Markdown table of rows (dicts); the columns are every key, in the order they first appear."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Report:
    """What one run of a script measured; :meth:`add` a row as it comes, :meth:`save` at the end."""

    script: str
    setup: str                       # one line: the model, data, steps, rounds ...
    settings: Mapping[str, Any]
    results: Optional[Path]          # the results folder (None: print only)
    smoke: bool = False
    gpu: bool = False                # the figures are a GPU's: kept under the GPU's kind
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        print(f"# {self.script}: {self.setup}", flush=True)

    def add(self, row: Mapping[str, Any]) -> None:
        """A row of the table, printed at once (a long run shows its figures as they come)."""
        self.rows.append(dict(row))
        print("| " + " | ".join(f"{k} {cell(v)}" for k, v in row.items()) + " |", flush=True)

    def note(self, line: str) -> None:
        self.notes.append(line)
        print(line, flush=True)

    def kind(self) -> str:
        name = machine.gpu() if self.gpu else ""
        return machine.gpu_kind(name) if name else machine.cpu().kind

    def record(self) -> dict[str, Any]:
        return {"script": self.script, "setup": self.setup, "date": datetime.now().isoformat(timespec="seconds"),
                "kind": self.kind(), "smoke": self.smoke, "machine": machine.facts(),
                "settings": dict(self.settings), "rows": self.rows, "notes": self.notes}

    def save(self) -> Optional[Path]:
        """The table printed whole, and the record written to ``<results>/<kind>/<script>.json``."""
        print("\n" + (table(self.rows) if self.rows else "(no rows)"), flush=True)
        if self.results is None:
            return None
        path = self.results / self.kind() / f"{self.script}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.record(), indent=1, default=str) + "\n")
        print(f"results: {path}", flush=True)
        return path
