"""What every engine wrote for itself, written once: small idioms an engine calls or inherits.

Each of these stood in two to four engines, in slightly different words;
``multidev.engine`` exports them, so an engine reads as its framework's work
alone:

- :func:`labels`: each device's labels, or ``None`` for each in a prediction batch (``Shards.y`` is ``None``);
- :func:`predictions`: the devices' logits in sample order, a ``(0, classes)`` array when no device has rows;
- :class:`ReplicaStates`: ``state()`` and ``replica_states()`` from one ``replica_state(i)``, so
  ``state()`` copies device 0's arrays alone, not every replica's;
- :class:`MultiProcess`: ``MultiProcessBackend``'s four members, forwarded to the engine's
  ``distributed`` module, whose ``launch``, ``join``, ``leave`` and ``all_sum`` every engine writes with
  the same signatures;
- :class:`WaitedSteps`: ``train_step`` and ``accumulate`` of an engine that queues its steps
  (``QueuesSteps``), each the queued step read at once.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, ClassVar, Optional, Sequence

import numpy as np

from multidev.rules.models import State
from multidev.rules.split import Shards

if TYPE_CHECKING:
    from multidev.engines.protocol import PendingStats, Setup, StepStats
    from multidev.processes.faults import Restart
    from multidev.processes.group import ProcessGroup
    from multidev.processes.launch import Launch


def labels(shards: Shards) -> Sequence[Optional[np.ndarray]]:
    """Each device's labels in device order: ``shards.y``, or ``None`` for every device of an unlabelled batch."""
    return shards.y if shards.y is not None else (None,) * len(shards.x)


def predictions(parts: Sequence[np.ndarray], num_classes: int, dtype: np.dtype) -> np.ndarray:
    """The devices' logits, in device order and so in sample order; no rows at all: a ``(0, num_classes)`` array."""
    return np.concatenate(parts) if len(parts) else np.zeros((0, num_classes), dtype)


class ReplicaStates:
    """``state()`` and ``replica_states()`` of ``Replicas``, from the engine's ``replica_state(i)``.

    ``replica_state(i)`` is device i's parameters and running statistics as
    canonical host arrays of their own (not views of what the device holds).
    ``state()`` copies device 0's alone: it is called after every epoch and
    for every checkpoint, where copying k replicas to keep one is waste.
    """

    setup: "Setup"
    #: how the gradients crossed the processes of a job ("shared memory", "gloo", ...), once the first sum
    #: chose; "" in a process of its own
    process_sums: str = ""

    def replica_state(self, device: int) -> State:
        """Device ``device``'s (this process's, in ``setup.devices`` order) canonical arrays, copied to the host."""
        raise NotImplementedError

    def state(self) -> State:
        return self.replica_state(0)

    def replica_states(self) -> list[State]:
        return [self.replica_state(i) for i in range(len(self.setup.devices))]


class MultiProcess:
    """The members ``MultiProcessBackend`` adds, forwarded to the engine's ``distributed`` module.

    An engine that claims ``multi_process`` sets ``distributed`` to its module
    that defines, with these very signatures, ``launch(argv, launch)``,
    ``join(group, local_rank)``, ``leave()`` and ``all_sum(values)``
    (docs/writing-a-backend.md); what it needs to remember between them (a
    kvstore, the device sums go to) lives in that module.
    """

    distributed: ClassVar[ModuleType]

    def launch(self, argv: Sequence[str], launch: "Launch") -> "Sequence[Restart]":
        return self.distributed.launch(argv, launch)

    def join(self, group: "ProcessGroup", local_rank: int) -> None:
        self.distributed.join(group, local_rank)

    def leave(self) -> None:
        self.distributed.leave()

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        return self.distributed.all_sum(values)


class WaitedSteps:
    """``train_step`` and ``accumulate`` from an engine's ``queue_step`` and ``queue_accumulate``: one body a step.

    An engine that claims ``pending_stats`` writes each step once, returning
    its sums still on the devices; the waiting forms read them at once.
    """

    def queue_step(self, batch, lr: float) -> "PendingStats":
        raise NotImplementedError

    def queue_accumulate(self, batch) -> "PendingStats":
        raise NotImplementedError

    def train_step(self, batch, lr: float) -> "StepStats":
        return self.queue_step(batch, lr).result()

    def accumulate(self, batch) -> "StepStats":
        return self.queue_accumulate(batch).result()
