"""The engine's forms: ways to compute the same step, one of which a CPU runs fastest, shipped per CPU kind or timed.

Each is one :class:`~.choice.Choice` (its pin variable, its forms, its key,
where its measurements are kept, its note for ``multidev backends``), and a
run's are decided into one :class:`~.decided.Forms` value that the step, the
model and the compiler are built with. The modules: ``choice`` (the
abstraction, and its kept measurements agreed in a job), ``shipped`` (the forms measuring chose on each CPU
kind met, which a run takes unless it measures), ``decided`` (the
run's value: settled when the replicas are made, decided at the first
batch), ``sums`` (BatchNorm's per-channel sums), ``threads`` (XLA's threads
per compiled step), ``parts`` (a CPU device whole or split into one part per
core) and ``conv_inputs`` (a convolution's input written once or recomputed
where read). None of them changes what a step computes, only how fast.
"""

from multidev.engine import network_traits

from .choice import Choice
from .conv_inputs import CONV_INPUTS
from .decided import Forms, decide, settle
from .parts import PARTS
from .sums import SUMS
from .threads import THREADS

#: every measured form, with the label ``multidev backends`` gives its note
CHOICES: dict[str, Choice] = {"BatchNorm sums": SUMS, "threads": THREADS, "device parts": PARTS,
                              "convolution inputs": CONV_INPUTS}

__all__ = ["CHOICES", "CONV_INPUTS", "PARTS", "SUMS", "THREADS", "Choice", "Forms", "decide", "network_traits",
           "settle"]
