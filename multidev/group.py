"""Jobs of several processes: how a worker learns its place, and how a launch is described.

One process per device (or per few devices) is how data parallelism runs for
real. A worker finds its rank and the number of processes in the environment
its launcher left: torchrun and Ray Train's ``TorchTrainer`` set ``RANK`` and
``WORLD_SIZE`` (and ``MASTER_ADDR`` / ``MASTER_PORT``), Slurm's ``srun`` sets
``SLURM_PROCID`` and ``SLURM_NTASKS``. ``multidev train --processes N``
starts its workers through the engine's own launcher, which sets the same.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from .errors import MultidevError
from .protocol import ProcessGroup
from .shard import Shards, cut, cut_for_process

DEFAULT_MASTER = "127.0.0.1:29500"


@dataclass(frozen=True)
class Joined:
    """This worker's place in a running job."""

    group: ProcessGroup
    local_rank: int  # among the processes of this machine: picks the GPU(s) it drives


def from_environment(env: Optional[Mapping[str, str]] = None) -> Optional[Joined]:
    """The job this process was started into, or None for a process on its own."""
    env = os.environ if env is None else env
    for rank_key, size_key, local_key in (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                                          ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")):
        if rank_key in env and size_key in env:
            try:
                rank, size, local = int(env[rank_key]), int(env[size_key]), int(env.get(local_key, "0"))
            except ValueError:
                raise MultidevError(f"{rank_key}={env[rank_key]!r}, {size_key}={env[size_key]!r}: whole numbers "
                                    f"expected from the launcher") from None
            return Joined(ProcessGroup(rank, size), local)
    return None


def parse_master(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MultidevError(f"--master {text!r}: write HOST:PORT, e.g. 127.0.0.1:29500")
    return host, int(port)


@dataclass(frozen=True)
class Launch:
    """What ``--processes N [--nnodes M --node-rank R --master HOST:PORT]`` asks for."""

    processes: int = 1           # worker processes on this machine
    nnodes: int = 1              # machines in the job
    node_rank: int = 0           # this machine's place among them
    master: str = DEFAULT_MASTER  # where the workers meet (node 0 listens there)
    timeout: float = 60.0        # seconds to wait for every machine to arrive

    def __post_init__(self) -> None:
        if self.processes < 1 or self.nnodes < 1:
            raise MultidevError(f"--processes and --nnodes must be at least 1, got {self.processes} and {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise MultidevError(f"--node-rank {self.node_rank} with --nnodes {self.nnodes}: "
                                f"number the machines 0 to {self.nnodes - 1}")
        parse_master(self.master)

    @property
    def size(self) -> int:
        return self.processes * self.nnodes


def digest(settings: Mapping[str, object]) -> int:
    """A number every rank computes from its settings: equal numbers, equal settings (checked before step one)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")  # exact in a float64


def differing(digests: list[int]) -> Optional[str]:
    """One line naming the ranks whose settings are not rank 0's, or None when all agree."""
    others = [r for r, d in enumerate(digests) if d != digests[0]]
    if not others:
        return None
    which = f"rank {others[0]} was" if len(others) == 1 else f"ranks {', '.join(map(str, others))} were"
    return (f"{which} started with other settings than rank 0 (engine, model, "
            f"data, epochs, batch size, learning rate, seed, BatchNorm, dtype, devices or resuming): start every "
            f"process with the same command")


def _alone(values: np.ndarray) -> np.ndarray:
    return values


@dataclass(frozen=True)
class Job:
    """The processes a training loop runs in: which rows this one reads, and how sums reach every rank."""

    group: ProcessGroup = field(default_factory=ProcessGroup)
    all_sum: Callable[[np.ndarray], np.ndarray] = _alone

    @property
    def writer(self) -> bool:
        """Rank 0 alone writes checkpoints, results and plots, and shows progress."""
        return self.group.rank == 0

    def shards(self, x: np.ndarray, y: Optional[np.ndarray], index: np.ndarray, sizes: Sequence[int],
               devices: int, whole: Optional[int] = None) -> Shards:
        """This process's part of the minibatch ``x[index]`` cut by ``sizes`` over all devices of the job.

        ``whole``: the rows of the update this minibatch is a micro-batch of.
        """
        if self.group.size == 1:
            shards = cut(x[index], None if y is None else y[index], sizes)
        else:
            shards = cut_for_process(x, y, index, sizes, self.group.rank, devices)
        return shards if whole is None else replace(shards, whole=whole)
