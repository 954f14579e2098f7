"""Canonical names for the layers read from an ONNX file.

A layer with parameters is named after its weight (torch's
``layer1.0.conv1.weight`` -> ``layer1.0.conv1``), one without after the
module scope torch writes into node names (``/pool/MaxPool`` -> ``pool``), or
numbered by kind (``relu1``) as the model language does.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional

Hint = tuple[str, str, str]  # ("exact", name, kind) or ("scope", scope, kind)


def clean(text: str) -> str:
    """A name made of letters, digits, _ and single dots, none at the ends."""
    text = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.]+", "_", text))
    return text.strip("._")


def _qualify(parts: list[str]) -> str:
    """torch's scope path (``/layer1/layer1.0/act``) as a dotted name (``layer1.0.act``)."""
    name = ""
    for part in map(clean, parts):
        if part:
            name = part if not name or part.startswith(name + ".") else f"{name}.{part}"
    return name


def hint(node, kind: str, weight: Optional[str] = None) -> Hint:
    """("exact", name, kind) or ("scope", scope, kind): what a layer's canonical name derives from."""
    base = clean(weight.rsplit(".", 1)[0]) if weight and "." in weight else ""
    if base:
        return ("exact", base, kind)
    parts = [p for p in node.name.split("/") if p]
    if len(parts) >= 2:
        return ("scope", _qualify(parts[:-1]), kind)
    if not parts or re.fullmatch(rf"{re.escape(node.op_type)}(_\d+)?", parts[0]) or not clean(parts[0]):
        return ("scope", "", kind)  # a generated name (Relu_3): numbered by kind as the model language does
    return ("exact", clean(parts[0]), kind)


def _unique(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


def names(hints: list[Hint]) -> list[str]:
    """Canonical names: exact ones as given; a scope holding one layer names it, else kinds are numbered in it."""
    per_scope = Counter(h[1] for h in hints if h[0] == "scope")
    dotted = [h[1] for h in hints if h[1]]
    out, taken, counts = [], {"input"}, Counter()
    for how, base, kind in hints:
        if how == "scope" and base and per_scope[base] == 1 and not any(d.startswith(base + ".") for d in dotted):
            how = "exact"
        if how == "exact":
            out.append(_unique(base, taken))
            continue
        prefix = base + "." if base else ""
        counts[prefix, kind] += 1
        out.append(_unique(f"{prefix}{kind}{counts[prefix, kind]}", taken))
    return out
