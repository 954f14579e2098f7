"""The torch engine's form on a CPU: images and convolution kernels in NCHW or NHWC memory, chosen by timing.

oneDNN runs some convolutions faster on NHWC: on an Intel Xeon with AMX,
ResNet-18's bf16 steps (1x28x28, 64 rows) took 311-323 ms in NHWC against
350-368 ms, while float32 steps were the same within the spread
(``bench/profile_torch.py`` with ``MULTIDEV_TORCH_LAYOUT``). No constant is right on every CPU, so
when a run builds its replicas on CPU devices the engine times a training
step's forward and backward in both layouts, on a copy of the model and
random images of the run's shard shape (at most 32 rows; the run itself is untouched), and
keeps the faster in ``layout.json`` under ``~/.cache/multidev/torch/<cpu>``
per model, shard shape and precision. ``multidev backends`` says what was
chosen; ``MULTIDEV_TORCH_LAYOUT=nchw`` or ``nhwc`` pins it (the test suite
pins ``nchw``). Float64 runs, inputs that are not images, models without
parameters, replicas built with no run's batch size (``Setup.rows`` None,
as in the kit) and the processes of a job (which take a kept choice, else
``nchw``) measure nothing.
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from multidev.engine import KeptChoices, Setup, cache_home, cpu_tag, pinned_form

ENV = "MULTIDEV_TORCH_LAYOUT"
FORMS = ("nchw", "nhwc")
DEFAULT = "nchw"
LABELS = {"nchw": "NCHW", "nhwc": "NHWC (channels_last)"}
REPEATS = 2  # timed steps per layout, after one untimed
PROBE_ROWS = 32  # at most this many of a shard's rows are timed: large images would otherwise take a minute


def _folder() -> Optional[Path]:
    return cache_home() / "torch" / cpu_tag()


_kept = KeptChoices("layout.json", FORMS, _folder)


def pinned() -> Optional[str]:
    return pinned_form(ENV, FORMS)


def chosen(setup: Setup, model: nn.Module, cuda: bool) -> frozenset[str]:
    """``{"channels_last"}`` where NHWC is this CPU's faster layout for the run, else none (GPUs: see :mod:`.gpu`)."""
    if cuda:
        return frozenset()
    form = pinned()
    if form is None:
        form = _measured(setup, model)
    return frozenset({"channels_last"}) if form == "nhwc" else frozenset()


def _measured(setup: Setup, model: nn.Module) -> str:
    spec = setup.spec
    if setup.dtype == "float64" or setup.rows is None or len(spec.in_shape) != 3 \
            or not any(True for _ in model.parameters()):  # nothing to train: no convolution, no backward to time
        return DEFAULT
    rows = max(1, math.ceil(setup.rows / (len(setup.devices) * setup.group.size)))
    model_key = hashlib.sha256(repr((spec.graph, spec.in_shape, spec.num_classes)).encode()).hexdigest()[:16]
    key = f"{model_key}:{rows}:{setup.precision}"
    if setup.group.size > 1:  # a job's processes time nothing (they would time each other): kept, or the default
        return _kept.get(key) or DEFAULT
    return _kept.fastest(key, {form: _timer(model, setup, rows, form) for form in FORMS})


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


def describe() -> str:
    """What ``multidev backends`` says of the layout on CPUs."""
    form = pinned()  # a pin that names no layout: multidev backends calls the engine unusable, and says why
    if form:
        return f"{LABELS[form]} ({ENV}={form})"
    return _kept.summary("per model, shard shape and precision when a run builds its replicas", ENV, LABELS)
