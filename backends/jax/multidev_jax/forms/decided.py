"""The run's forms, decided once into one value (:class:`Forms`) that the step, the model and the compiler take.

A run settles what it can when its replicas are made (:func:`settle`: the
pins, GPUs, a job's agreement); the device parts and the convolutions' inputs
still open are timed on the first batch (:func:`decide`), each form's train
step once, on copies of the state. BatchNorm's sums and XLA's threads left
open (None) are decided per shape and per step program as the step is traced
and compiled (:mod:`.sums`, :mod:`.threads`): their value says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import jax

from multidev.engine import ModelSpec

from . import conv_inputs, parts, sums
from .conv_inputs import CONV_INPUTS
from .parts import PARTS
from .threads import THREADS


@dataclass(frozen=True)
class Forms:
    """One run's forms. ``parts``: JAX devices per named device (1: whole); ``conv_inputs``: ``fused`` or ``once``;
    ``sums``: BatchNorm's sums' form, None for each shape's measured one; ``threads``: XLA's threads, None for each
    step program's measured one. ``parts`` or ``conv_inputs`` None: timed at the first batch (:func:`decide`)."""

    parts: Optional[int] = 1
    conv_inputs: Optional[str] = "fused"
    sums: Optional[str] = "matvec"
    threads: Optional[str] = "cores"

    @property
    def decided(self) -> bool:
        return self.parts is not None and self.conv_inputs is not None

    def meanwhile(self) -> Forms:
        """The forms to place the state with until the first batch decides: the device whole, inputs fused."""
        return dataclasses.replace(self, parts=self.parts or 1, conv_inputs=self.conv_inputs or CONV_INPUTS.unmeasured)


def split(named: list[jax.Device], processes: int) -> int:
    """The parts a device runs on where split (1: never)."""
    return parts.split_parts(named, processes, len(jax.devices("cpu")))


def settle(spec: ModelSpec, named: list[jax.Device], processes: int, measure: bool = True) -> Forms:
    """What a run's devices, pins and job fix before any batch; the rest None, to decide (``measure``), or each
    choice's unmeasured form.

    A float64 run measures nothing: it is a truth, read for its numbers, and timing its forms compiled ResNet-18's
    step and evaluation over and over (627 s of a 741 s epoch on 1,400 digits on the Zen 3).
    """
    settled = Forms(parts=parts.settled(split(named, processes)),
                    conv_inputs=conv_inputs.settled(spec, named, processes),
                    sums=sums.settled(named[0].platform == "cpu"), threads=THREADS.pinned())
    if measure:
        return settled
    return Forms(parts=1 if settled.parts is None else settled.parts,
                 conv_inputs=settled.conv_inputs or CONV_INPUTS.unmeasured,
                 sums=settled.sums or sums.SUMS.unmeasured, threads=settled.threads or THREADS.unmeasured)


def decide(settled: Forms, named: list[jax.Device], length: int, program: tuple,
           seconds: Callable[[Forms], float], traits: frozenset[str] = frozenset()) -> Forms:
    """``settled`` with the convolutions' inputs, then the parts, decided: each kept, else the faster by ``seconds``
    (a train step timed in those forms; each form timed once, whichever choice asks), else shipped for this CPU kind
    and a network of ``traits`` (:func:`multidev.engine.network_traits`).

    ``length``: the shard length timed; ``program``: the step besides shapes, devices and forms (the keys' recipe).
    """
    timed: dict[Forms, float] = {}

    def timer(trial: Forms) -> Callable[[], float]:
        def timing() -> float:
            if trial not in timed:
                timed[trial] = seconds(trial)
            return timed[trial]
        return timing

    forms, count = settled, split(named, 1)
    if forms.conv_inputs is None:
        name = conv_inputs.key(len(named), length, program)
        forms = dataclasses.replace(forms, conv_inputs=CONV_INPUTS.fastest(
            name, {form: timer(dataclasses.replace(forms, parts=1, conv_inputs=form)) for form in CONV_INPUTS.forms}))
    if forms.parts is None:
        name = parts.key(len(named), count, length, (*program, forms.conv_inputs))
        form = PARTS.fastest(name, {"whole": timer(dataclasses.replace(forms, parts=1)),
                                    "split": timer(dataclasses.replace(forms, parts=count))}, traits)
        forms = dataclasses.replace(forms, parts=count if form == "split" else 1)
    return forms
