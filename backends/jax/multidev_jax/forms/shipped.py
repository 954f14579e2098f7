"""The forms measuring chose on each CPU kind met, shipped with the engine: a run takes them and times nothing.

Timing every form of a new program compiled ResNet-18's train step five
times before its first step (156 of 161 s on a Zen 3); the choices that
timing made on one CPU kind agree from program to program, or differ by
less than a run's noise where they do not (the Zen 3's kept choices: one
thread for 55 programs and every core for 32). So a run takes, for each
choice, the form this table gives for its CPU kind (:func:`multidev.engines.cpu_kind.this_cpu_kind`),
a kind never met the table of the nearest one of its vendor, and any other
CPU each choice's unmeasured form. The same command then computes the same
way on every machine of a kind, whether or not it ever measured.

``MULTIDEV_JAX_FORMS=measure`` times each form on this CPU instead (per
program, per BatchNorm shape), keeping the winners beside the compilation
cache; kept winners are taken before this table in either mode.
"""

from __future__ import annotations

from typing import Optional

from multidev.engine import pinned_form
from multidev.engines.cpu_kind import this_cpu_kind

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
#: a kind never met takes the table of its vendor's nearest kind
NEAREST = {"intel": "intel-xeon-amx", "amd": "amd-epyc-zen4"}


def measuring() -> bool:
    """Whether forms not kept are timed on this CPU (``MULTIDEV_JAX_FORMS=measure``) rather than shipped."""
    return pinned_form(ENV, MODES) == "measure"


def kind_table(kind: str) -> tuple[str, dict[str, str]]:
    """(the kind whose table a CPU of ``kind`` takes, that table), or (``kind``, {}) for none."""
    if kind in SHIPPED:
        return kind, SHIPPED[kind]
    nearest = NEAREST.get(kind.split("-")[0])
    return (nearest, SHIPPED[nearest]) if nearest else (kind, {})


def shipped(choice: str) -> Optional[str]:
    """The form of ``choice`` (``sums``, ``threads``, ``parts``, ``conv_inputs``) shipped for this CPU, or None."""
    return kind_table(this_cpu_kind())[1].get(choice)
