"""The forms measuring chose on each CPU kind met, shipped with the engine: a run takes them and times nothing.

Timing every form of a new program compiled ResNet-18's train step five
times before its first step (156 of 161 s on a Zen 3); the choices that
timing made on one CPU kind agree from program to program, or differ by
less than a run's noise where they do not (the Zen 3's kept choices: one
thread for 55 programs and every core for 32). So a run takes, for each
choice, the form this table gives for its CPU kind (:func:`multidev.engines.cpu_kind.this_cpu_kind`),
a kind never met the table of the nearest one of its vendor, and any other
CPU each choice's unmeasured form; where a kind's forms differed by network,
its ``BY_TRAIT`` gives them per trait (:func:`multidev.engine.network_traits`).
The same command then computes the same way on every machine of a kind,
whether or not it ever measured.

``MULTIDEV_JAX_FORMS=measure`` times each form on this CPU instead (per
program, per BatchNorm shape), keeping the winners beside the compilation
cache; kept winners are taken before this table in either mode.
"""

from __future__ import annotations

from typing import Mapping, Optional

from multidev import engine
from multidev.engine import pinned_form, this_cpu_kind

ENV = "MULTIDEV_JAX_FORMS"
MODES = ("shipped", "measure")

#: kind -> choice (its file's name) -> form; measured per program in bench/bench_jax.py runs (docs/design/jax-cpu.md)
SHIPPED: dict[str, dict[str, str]] = {
    # BatchNorm's sums 10-15x faster as matrix-vector products; split in 2 parts of one thread each: 1.52x the loop
    "intel-xeon-amx": {"sums": "matvec", "threads": "one", "parts": "split", "conv_inputs": "once"},
    # sums staged (0.5 ms against 2.6 reduced, 0.9 as products); inputs once: 1.29 s a step against 1.40
    "amd-epyc-zen4": {"sums": "staged", "threads": "one", "parts": "whole", "conv_inputs": "once"},
    # the kept choices of two days' runs: inputs once 17 / fused 15, sums matvec 50 / staged 44 / reduce 38,
    # threads one 55 / cores 32, parts whole 14 / split 1
    "amd-epyc-zen3": {"sums": "matvec", "threads": "one", "parts": "whole", "conv_inputs": "once"},
}
#: kind -> choice -> a network's trait (``network_traits``) -> its form, where measuring chose otherwise for it
BY_TRAIT: dict[str, dict[str, dict[str, str]]] = {
    # one device split in two parts (batch 32, five steps): the ViT 897 against 565 samples/s whole, MobileNetV2
    # 21.4 against 14.9 (0.77-1.00 s a step against 0.81-1.15 with its depthwise taps written once); ResNet-18
    # alike at 32x32, but bench_jax's (28x28, batch 64) 1.07 of the Flax loop split, 1.18 whole
    "amd-epyc-zen4": {"parts": {"attention": "split", "depthwise": "split"}},
}


def measuring() -> bool:
    """Whether forms not kept are timed on this CPU (``MULTIDEV_JAX_FORMS=measure``) rather than shipped."""
    return pinned_form(ENV, MODES) == "measure"


def kind_table(kind: str) -> tuple[str, Mapping[str, str]]:
    """(the kind whose table a CPU of ``kind`` takes, that table), or (``kind``, {}) for none."""
    return engine.kind_table(kind, SHIPPED)


def shipped(choice: str, traits: frozenset[str] = frozenset()) -> Optional[str]:
    """The form of ``choice`` (``sums``, ``threads``, ``parts``, ``conv_inputs``) shipped for this CPU and a network
    of ``traits``, or None."""
    kind, table = kind_table(this_cpu_kind())
    by_trait = BY_TRAIT.get(kind, {}).get(choice, {})
    return next((by_trait[t] for t in sorted(traits) if t in by_trait), table.get(choice))


def trait_note(choice: str) -> str:
    """What ``multidev backends`` adds for a choice shipped otherwise for some networks ("" for none)."""
    return engine.trait_note(BY_TRAIT.get(kind_table(this_cpu_kind())[0], {}).get(choice, {}))
