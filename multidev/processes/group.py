"""A worker's place in a job: its rank among the job's processes, from its launcher's environment.

One process per device (or per few devices) is how data parallelism runs for
real. A worker finds its rank and the number of processes in the environment
its launcher left: torchrun and Ray Train's ``TorchTrainer`` set ``RANK`` and
``WORLD_SIZE`` (and ``MASTER_ADDR`` / ``MASTER_PORT``), Slurm's ``srun`` sets
``SLURM_PROCID`` and ``SLURM_NTASKS``. ``multidev train --processes N``
starts its workers through the engine's own launcher, which sets the same.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from multidev.errors import MultidevError


@dataclass(frozen=True)
class ProcessGroup:
    """The processes of one job (contract: Process groups); a single process is a group of one.

    Devices are numbered rank-major over the group: process r's devices come
    after those of every lower rank, so the split rule over the global batch
    gives process r a contiguous run of rows, cut again over its own devices.
    """

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise MultidevError(f"process rank {self.rank} of {self.size}: need 0 <= rank < size and size >= 1")


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
