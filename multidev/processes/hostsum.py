"""The processes of one machine sum their gradients through shared memory instead of TCP.

Between two processes on one machine, gloo's all-reduce of ResNet-18's
gradients (11.2M floats) goes through the loopback socket: each float is
copied into the kernel and out again, twice, and on 2 cores nothing is left
to overlap it with. Measured on an Intel Xeon (2 cores, 2 torch processes of
one thread, a step's 181 ms of compute): 70-74 ms a step for gloo with its
flatten and copy back, 25-29 ms through this module; DDP's buckets
overlapping the backward pass took as long as one gloo call (255 ms a step),
since both cores were busy computing. Gloo's own shared-memory all-reduce was
merged and reverted upstream, and is not in the frameworks' builds here.

Each process copies its flat gradient into its slot of one ``/dev/shm`` file;
after a barrier, process r adds up chunk r of every slot, in rank order (the
order the devices of one process are summed in, so N processes still equal N
devices bit for bit), into the file's total; after a second barrier every
process reads the whole total. The barrier is the engine's own (a collective
of its runtime), so a lost peer fails as every other collective does.
Used only where every process of the job is on this machine and the file fits.
"""

from __future__ import annotations

import mmap
import os
from itertools import count
from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np

from multidev.processes.faults import restart_count
from multidev.processes.group import ProcessGroup

FOLDER = Path("/dev/shm")
ENV = "MULTIDEV_HOST_SUM"  # "off": every sum goes through the engine's runtime
ALIGN = 16            # values: 64 bytes of float32 (JAX's CPU client aliases, not copies, memory so aligned)
_opened = count()          # every rank opens its sums in the same order: the n-th is the same file on all


def one_machine(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the launcher started every process of the job on this machine (torchrun's variables)."""
    env = os.environ if env is None else env
    local, world = env.get("LOCAL_WORLD_SIZE", ""), env.get("WORLD_SIZE", "")
    return local.isdigit() and local == world and bool(env.get("MASTER_PORT")) and env.get(ENV, "") != "off"


def _room(nbytes: int) -> bool:
    try:
        stat = os.statvfs(FOLDER)
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize >= 2 * nbytes  # leave room for the job's other files


def _stride(numel: int) -> int:
    """Values from one slot's start to the next's: each starts 64-byte aligned (a framework wraps it, no copy)."""
    return -(-numel // ALIGN) * ALIGN


class HostSum:
    """Sums of one flat array over the processes of one machine; ``open`` makes one on every rank at once.

    Either :meth:`sum` adds the slots here, or :meth:`gather` hands them to a
    framework that adds them inside its own step (JAX, which then needs two
    sets of slots, used in turn). Between sums a sharded job gathers its rows
    in the total (:mod:`.rowgather`).
    """

    def __init__(self, buffer: mmap.mmap, numel: int, dtype: np.dtype, group: ProcessGroup,
                 barrier: Callable[[], None], sets: int = 1) -> None:
        self._buffer, self.numel, self.group, self._barrier = buffer, numel, group, barrier
        stride = _stride(numel)
        rows = np.frombuffer(buffer, dtype, (sets * group.size + 1) * stride).reshape(-1, stride)[:, :numel]
        self._sets = [rows[i * group.size:(i + 1) * group.size] for i in range(sets)]
        self._turn, self._total = 0, rows[-1]
        chunk = -(-numel // group.size)
        self._mine = slice(min(numel, group.rank * chunk), min(numel, (group.rank + 1) * chunk))

    @classmethod
    def open(cls, numel: int, dtype: object, group: ProcessGroup, barrier: Callable[[], None],
             all_sum: Callable[[np.ndarray], np.ndarray], sets: int = 1) -> Optional["HostSum"]:
        """A sum of ``numel`` values shared by every rank, or None on every rank where one cannot have it.

        A collective: every rank calls it at the same point. ``all_sum`` (the
        engine's sum of a few numbers) makes the ranks agree; ``barrier`` orders
        the file's making before its opening.
        """
        dtype = np.dtype(dtype)
        nbytes = (sets * group.size + 1) * _stride(numel) * dtype.itemsize
        votes = np.zeros(group.size)
        votes[group.rank] = float(one_machine() and _room(nbytes))
        number = next(_opened)
        if group.size < 2 or numel == 0 or not all(all_sum(votes)):
            return None
        path = FOLDER / (f"multidev-sum-{os.getuid()}-{os.environ['MASTER_PORT']}-{restart_count()}-{number}")
        if group.rank == 0:
            with open(path, "wb") as made:
                made.truncate(nbytes)
        barrier()
        with open(path, "r+b") as opened:
            buffer = mmap.mmap(opened.fileno(), nbytes)
        barrier()
        if group.rank == 0:
            path.unlink(missing_ok=True)  # the mappings stay; nothing is left behind if the job dies
        return cls(buffer, numel, dtype, group, barrier, sets)

    def barrier(self) -> None:
        """Every rank waits for every other (the engine's own barrier): for a caller that shares the total too."""
        self._barrier()

    def slot(self) -> np.ndarray:
        """Where this rank puts its values before :meth:`sum` or :meth:`gather`."""
        return self._sets[self._turn][self.group.rank]

    def sum_view(self) -> np.ndarray:
        """Where :meth:`sum` leaves the total (a view of its own, for a framework that wraps it)."""
        return self._total.view()

    def sum(self) -> np.ndarray:
        """Every rank's slot added up, in rank order; valid until the next call (copy it to keep it)."""
        if len(self._sets) > 1:
            raise ValueError("sum adds one set of slots: open(..., sets=1), or gather with two")
        self._barrier()  # every slot written
        slots, part, total = self._sets[0], self._mine, self._total[self._mine]
        np.add(slots[0, part], slots[1, part], out=total)
        for rank in range(2, self.group.size):
            np.add(total, slots[rank, part], out=total)
        self._barrier()  # every chunk summed; the next call's first barrier waits until all have read it
        return self._total

    def gather(self) -> np.ndarray:
        """Every rank's slot, (ranks, numel), once all are written: for a sum the caller adds up itself.

        One barrier instead of :meth:`sum`'s two: the next call's slots are the
        other set, so a rank writes these again only after the next call's
        barrier, which a rank reaches only when done reading them (the caller's
        part: JAX's next step depends on the update that read them).
        """
        if len(self._sets) < 2:
            raise ValueError("gather needs two sets of slots: open(..., sets=2)")
        self._barrier()  # every slot written
        slots, self._turn = self._sets[self._turn], (self._turn + 1) % len(self._sets)
        return slots
