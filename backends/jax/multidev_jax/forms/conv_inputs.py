"""Each convolution's input written once, or recomputed where it is read: chosen by timing the train step.

XLA:CPU copies a cheap elementwise chain (BatchNorm's scale and shift, ReLU,
a residual sum) into every operation that reads its result, rather than
writing the result once. A convolution's input is read twice in training: by
the convolution, and in the backward pass by the transpose XLA:CPU makes of
it for the weight gradient (channels first, rows last), which then recomputes
the chain at every element while reading its inputs out of order. On an AMD
EPYC (Zen 4; ResNet-18, 64 images of 28x28, one device) those transposes
took 250 ms of a 1.44 s step, 17-31 ms each in the first stage. Read through
an identity gather (:func:`..conv.computed_once`), which XLA never copies,
the input is written once and read twice: the step took 1.29 s with the
BatchNorm sums ``staged`` (1.40 s without the gather). An Intel Xeon gained
6-8% a step. Whether it pays depends on the program and the CPU (layer by
layer the gather won some shapes and lost others), so the first time a run
of one process places a batch on CPU devices, the engine times a train step
each way on copies of the state (the run itself is untouched) and keeps the
faster, in ``conv_inputs.json`` beside the compilation cache (per CPU kind,
keyed as :mod:`.parts` keys its choices); ``multidev backends`` counts them.

``MULTIDEV_JAX_CONV_INPUTS=fused`` or ``once`` pins a form (the test suite
pins ``fused``). GPUs always take ``fused``: XLA:GPU fuses otherwise, and no
GPU was timed; so does a model without convolutions (the forms are one
program). A job of several processes never measures (its processes must
compile one program): each takes rank 0's pin, else ``once``, the faster on
every CPU timed (a worker of one thread on the Zen 4: 1.14 s a step against
1.18).
"""

from __future__ import annotations

from typing import Optional

import jax

from multidev.engine import ModelSpec
from multidev.nn import layers

from . import parts
from .choice import Choice

CONV_INPUTS = Choice("MULTIDEV_JAX_CONV_INPUTS", ("fused", "once"), "conv_inputs.json", unmeasured="fused",
                     in_job="once", when="at a run's first batch (fused: recomputed where read; once: written once)")


def key(devices: int, length: int, recipe: tuple) -> str:
    """What a choice holds for: as a choice of parts (:func:`.parts.key`), for the devices whole."""
    return parts.key(devices, 1, length, recipe)


def settled(spec: ModelSpec, devices: list[jax.Device], processes: int) -> Optional[str]:
    """The form where nothing is timed (pinned, GPUs, no convolution, a job's processes), else None: time it."""
    form = CONV_INPUTS.pinned()
    if any(d.platform != "cpu" for d in devices) or not any(isinstance(node.layer, layers.Conv2d)
                                                            for node in spec.graph.nodes):
        return CONV_INPUTS.unmeasured
    if processes > 1:  # rank 0's pin or default, for every process
        return CONV_INPUTS.agreed("job", default=form)
    return form
