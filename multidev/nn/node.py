"""Nodes of the functional form: a layer applied to other nodes, inside the scope of the block that applied it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from multidev.errors import MultidevError

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Scope:
    """A named or numbered group of layers: a Sequential or Residual applied once."""

    kind: str
    name: Optional[str]
    parent: Optional["Scope"]


@dataclass(frozen=True, eq=False)
class Node:
    """A layer applied to other nodes' outputs (or the input, whose layer is None)."""

    layer: Any  # a multidev.nn Layer; None for the input
    inputs: tuple["Node", ...] = ()
    scope: Optional[Scope] = None
    order: int = field(default_factory=lambda: next(_ids))


def Input() -> Node:
    """The model's input: images or feature vectors, whichever the data holds."""
    return Node(None)


#: the blocks being applied, innermost last: a layer applied now belongs to the last one's scope
current: list[Optional[Scope]] = [None]


def apply(layer: Any, inputs: Sequence[Node]) -> Node:
    """``layer`` on ``inputs``, checked for how many it takes."""
    if not inputs or not all(isinstance(n, Node) for n in inputs):
        raise MultidevError(f"{type(layer).__name__} is applied to {inputs!r}: apply layers to nn.Input() or to "
                            f"other layers' outputs")
    if layer.arity is not None and len(inputs) != layer.arity:
        raise MultidevError(f"{type(layer).__name__} takes {layer.arity} input(s), got {len(inputs)}")
    if layer.arity is None and len(inputs) < 2:
        raise MultidevError(f"{type(layer).__name__} takes two inputs or more, got {len(inputs)}")
    return Node(layer, tuple(inputs), current[-1])
