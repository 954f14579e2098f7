"""Which layers of the model language an engine builds, so a definition it cannot build is one line, not a traceback.

An engine states them in ``layers`` (the names ``multidev.nn.layers.LAYERS``
uses, best derived from its own table of builders so the two cannot drift).
The core checks a definition against them before any replica is built, the
kit skips the cases of layers an engine leaves out (with the reason), and
``multidev backends`` lists what each engine lacks. An engine without
``layers`` is taken at its word: it builds what it gets, or says why not.
"""

from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from multidev.errors import MultidevError
from multidev.nn.graph import Graph
from multidev.nn.layers import LAYERS


@runtime_checkable
class BuildsLayers(Protocol):
    """An engine that states the layers it builds (the names of ``multidev.nn.layers.LAYERS``)."""

    name: str
    layers: frozenset[str]


def lacking(engine: object, names: Optional[frozenset[str]] = None) -> list[str]:
    """The layers of ``names`` (every layer of the language by default) the engine does not build, sorted."""
    names = frozenset(LAYERS) if names is None else names
    return sorted(names - engine.layers) if isinstance(engine, BuildsLayers) else []


def check_layers(engine: object, graph: Graph) -> None:
    """One line naming the first node the engine cannot build, and what to do."""
    missing = set(lacking(engine, frozenset(type(n.layer).__name__ for n in graph.nodes)))
    for node in graph.nodes:
        if type(node.layer).__name__ in missing:
            raise MultidevError(f"the {engine.name} engine does not build {node.layer.where(node.name)}: choose an "
                                f"engine that does (multidev backends lists what each lacks) or upgrade "
                                f"multidev-{engine.name}")


def summary(engine: object) -> str:
    """What ``multidev backends`` says of an engine's layers."""
    if not isinstance(engine, BuildsLayers):
        return "layers: not stated"
    missing = lacking(engine)
    return f"layers: all {len(LAYERS)}" if not missing else \
        f"layers: {len(LAYERS) - len(missing)} of {len(LAYERS)} (not {', '.join(missing)})"
