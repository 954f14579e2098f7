"""The torch engine's form on a CPU: images and convolution kernels in NCHW or NHWC memory, shipped per CPU kind.

oneDNN runs some convolutions faster on NHWC, and which depends on the CPU,
the network and the precision: on an Intel Xeon with AMX, MobileNetV2's
float32 steps took 0.65 of NCHW's time in NHWC and ResNet-18's bf16 steps
0.87, while ResNet-18's float32 steps came out either way from one timing to
the next (0.94-1.07). Timing both layouts when a run built its replicas cost
that Xeon 4 s of a first step of 8, and where they are that close the noise
chose, so two machines of a kind rounded differently. So a run takes the
layout shipped for its CPU kind (:data:`SHIPPED`: per precision, and per
kind of network where a trait decides, as :mod:`multidev.engines.shipped`
states); ``MULTIDEV_TORCH_LAYOUT=measure`` times both on a copy of the model
and random images of the run's shard shape (at most 32 rows; the run itself
is untouched) and keeps the faster in ``layout.json`` under
``~/.cache/multidev/torch/<cpu>`` per model, shard shape and precision,
which later runs take first in either mode. ``nchw`` or ``nhwc`` pins it
(the test suite pins ``nchw``); ``multidev backends`` says which. Float64
runs, inputs that are not images and models without parameters take NCHW;
the processes of a job time nothing (they would time each other).
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from multidev.engine import TRAIT_WORDS, KeptChoices, Setup, cache_home, cpu_tag, kind_table, network_traits, \
    pinned_form, this_cpu_kind

ENV = "MULTIDEV_TORCH_LAYOUT"
FORMS = ("nchw", "nhwc")
MODES = (*FORMS, "measure")
DEFAULT = "nchw"
#: kind -> a precision (``fp32``, ``bf16``) or a network's trait (:func:`multidev.engine.network_traits`)
#: -> the layout; a trait's entry stands before the precision's. Measured in one process, the layouts taking turns
#: (docs/design/cpu-speed.md)
SHIPPED: dict[str, dict[str, str]] = {
    # NHWC / NCHW step time, 1 device: MobileNetV2 (32x32, 32 rows) 0.65, ResNet-18 bf16 (28x28, 64) 0.87;
    # ResNet-18 fp32 0.94-1.07, the ViT 1.02
    "intel-xeon-amx": {"fp32": "nchw", "bf16": "nhwc", "depthwise": "nhwc"},
    # what bench_models' measuring runs chose on the Zen 4: NHWC for MobileNetV2, NCHW for ResNet-50
    "amd-epyc-zen4": {"fp32": "nchw", "depthwise": "nhwc"},
}
LABELS = {"nchw": "NCHW", "nhwc": "NHWC (channels_last)"}
REPEATS = 2  # timed steps per layout, after one untimed
PROBE_ROWS = 32  # at most this many of a shard's rows are timed: large images would otherwise take a minute


def _folder() -> Optional[Path]:
    return cache_home() / "torch" / cpu_tag()


_kept = KeptChoices("layout.json", FORMS, _folder)


def pinned() -> Optional[str]:
    """The layout the environment pins, ``measure``, or None (the kept or shipped one)."""
    return pinned_form(ENV, MODES)


def shipped(precision: str, traits: frozenset[str] = frozenset()) -> str:
    """The layout shipped for this CPU kind, a run's ``precision`` and a network of ``traits``."""
    _, table = kind_table(this_cpu_kind(), SHIPPED)
    return next((table[t] for t in sorted(traits) if t in table), table.get(precision, table.get("fp32", DEFAULT)))


def chosen(setup: Setup, model: nn.Module, cuda: bool) -> frozenset[str]:
    """``{"channels_last"}`` where NHWC is this CPU's faster layout for the run, else none (GPUs: see :mod:`.gpu`)."""
    if cuda:
        return frozenset()
    form = pinned()
    if form not in FORMS:
        form = _settled(setup, model, measure=form == "measure")
    return frozenset({"channels_last"}) if form == "nhwc" else frozenset()


def _settled(setup: Setup, model: nn.Module, measure: bool) -> str:
    """The kept layout for the run's model, shard shape and precision, else the faster of both (``measure``, one
    process), else the shipped one."""
    spec = setup.spec
    if setup.dtype == "float64" or len(spec.in_shape) != 3 or not any(True for _ in model.parameters()):
        return DEFAULT  # no images, or nothing to train: no convolution whose layout could matter
    if setup.rows is None:  # no run's batch size (the kit): no shard shape to key a choice by
        return shipped(setup.precision, network_traits(spec))
    rows = setup.full_shard()
    model_key = hashlib.sha256(repr((spec.graph, spec.in_shape, spec.num_classes)).encode()).hexdigest()[:16]
    key = f"{model_key}:{rows}:{setup.precision}"
    kept = _kept.get(key)
    if kept is not None:
        return kept
    if measure and setup.group.size == 1:
        return _kept.fastest(key, {form: _timer(model, setup, rows, form) for form in FORMS})
    return shipped(setup.precision, network_traits(spec))


def _timer(model: nn.Module, setup: Setup, rows: int, form: str) -> Callable[[], float]:
    """Seconds of the best of a few training forward and backward passes in ``form``, on a copy of ``model``."""
    layout = torch.channels_last if form == "nhwc" else torch.contiguous_format
    spec = setup.spec

    def seconds() -> float:
        probe = copy.deepcopy(model).to(memory_format=layout).train()
        generator = torch.Generator().manual_seed(0)
        n = min(rows, PROBE_ROWS)
        x = torch.randn(n, *spec.in_shape, generator=generator).contiguous(memory_format=layout)
        y = torch.randint(0, spec.num_classes, (n,), generator=generator)
        masks = {node: torch.ones(n, *shape) for node, _, shape in spec.dropouts()} or None
        best = math.inf
        for attempt in range(REPEATS + 1):
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=setup.precision == "bf16"):
                logits = probe(x, masks)
            F.cross_entropy(logits.float(), y).backward()
            if attempt:
                best = min(best, time.perf_counter() - start)
            probe.zero_grad(set_to_none=True)
        return best

    return seconds


def _shipped_note(table: Mapping[str, str]) -> str:
    """A kind's table in words: its float32 layout, then where it takes the other."""
    base = table.get("fp32", DEFAULT)
    where = [f"in {p}" for p in ("bf16",) if table.get(p, base) != base]
    where += [f"for networks with {words}" for t, words in TRAIT_WORDS.items() if table.get(t, base) != base]
    other = next(f for f in FORMS if f != base)
    return LABELS[base] + (f"; {LABELS[other]} {' and '.join(where)}" if where else "")


def describe() -> str:
    """What ``multidev backends`` says of the layout on CPUs."""
    form = pinned()  # a pin that names no layout: multidev backends calls the engine unusable, and says why
    when = "per model, shard shape and precision when a run builds its replicas"
    if form in FORMS:
        return f"{LABELS[form]} ({ENV}={form})"
    if form == "measure":
        return _kept.summary(when, ENV, LABELS)
    kind, table = kind_table(this_cpu_kind(), SHIPPED)
    note = _shipped_note(table)
    note += f"; shipped for {kind}" if table else ""
    note += f" ({ENV}=measure times both {when})"
    if any(_kept.counts().values()):  # an earlier measuring run's choices, taken first where they hold
        note += f"; taken first where kept: {_kept.summary(when, ENV, LABELS)}"
    return note
