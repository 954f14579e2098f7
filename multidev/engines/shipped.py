"""Forms an engine ships per CPU kind, so that a run on a kind already met times none.

Timing forms holds a first run (JAX compiled ResNet-18's step five times
over; torch's two layouts took 4 of an Intel Xeon's 8 s to the first step),
and where two forms are close on a kind, the timing's noise picks one, so two
machines of that kind would round differently. So an engine keeps a table of
the forms its measuring chose on each kind met (:func:`.cpu_kind.this_cpu_kind`),
per kind of network where they differed (:func:`network_traits`); a kind never
met takes its vendor's nearest table, any other CPU none (the engine's
unmeasured forms).
"""

from __future__ import annotations

from typing import Mapping, TypeVar

from multidev.nn import layers
from multidev.rules.models import ModelSpec

#: a kind never met takes the table of its vendor's nearest kind
NEAREST = {"intel": "intel-xeon-amx", "amd": "amd-epyc-zen4"}
#: how ``multidev backends`` names each trait of :func:`network_traits`
TRAIT_WORDS = {"attention": "attention", "depthwise": "depthwise convolutions"}

Form = TypeVar("Form")


def kind_table(kind: str, tables: Mapping[str, Mapping[str, Form]]) -> tuple[str, Mapping[str, Form]]:
    """(the kind whose table a CPU of ``kind`` takes, that table), or (``kind``, {}) for none."""
    if kind in tables:
        return kind, tables[kind]
    nearest = NEAREST.get(kind.split("-")[0])
    return (nearest, tables[nearest]) if nearest in tables else (kind, {})


def network_traits(spec: ModelSpec) -> frozenset[str]:
    """What in a network a kind's shipped forms may depend on: ``attention`` (a transformer's), ``depthwise``
    (grouped convolutions, as MobileNet's)."""
    found = set()
    for node in spec.graph.nodes:
        if isinstance(node.layer, (layers.MultiHeadAttention, layers.WindowAttention)):
            found.add("attention")
        elif isinstance(node.layer, layers.Conv2d) and node.layer.groups > 1:
            found.add("depthwise")
    return frozenset(found)


def trait_note(by_trait: Mapping[str, str]) -> str:
    """What ``multidev backends`` adds for forms shipped per trait (``by_trait``: trait -> form), "" for none."""
    forms = {form: [TRAIT_WORDS[t] for t in sorted(by_trait) if by_trait[t] == form] for form in by_trait.values()}
    return "".join(f" ({form} for networks with {' or '.join(words)})" for form, words in sorted(forms.items()))
