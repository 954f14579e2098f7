"""The split rule (contract: Split): one function that every engine uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Mapping, Optional, Sequence, TypeVar

import numpy as np

from multidev.errors import MultidevError


def shard_sizes(batch_size: int, num_devices: int, weights: Sequence[float] | None = None) -> list[int]:
    """Rows per device for a minibatch of ``batch_size`` over ``num_devices``.

    Without weights this is ``numpy.array_split``: the first ``B mod k`` shards
    get one row more. With weights, sizes are proportional to them, rounded by
    largest remainder with ties to the lower index. Sizes always add up to B;
    devices beyond B get an empty shard.
    """
    if batch_size < 0:
        raise MultidevError(f"batch size must be >= 0, got {batch_size}")
    if num_devices < 1:
        raise MultidevError(f"need at least one device, got {num_devices}")
    if weights is None:
        base, extra = divmod(batch_size, num_devices)
        return [base + (1 if i < extra else 0) for i in range(num_devices)]
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (num_devices,):
        raise MultidevError(f"need one weight per device ({num_devices}), got {len(w)}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise MultidevError("device weights must be finite, non-negative and not all zero")
    exact = batch_size * w / w.sum()
    sizes = np.floor(exact).astype(int)
    remainder = exact - sizes
    # Largest remainder first; a stable sort keeps the lower index first on ties.
    order = np.argsort(-remainder, kind="stable")
    for i in order[: batch_size - int(sizes.sum())]:
        sizes[i] += 1
    return [int(s) for s in sizes]


def shard_bounds(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of each contiguous shard, in sample order."""
    ends = np.cumsum(sizes)
    return [(int(e - s), int(e)) for s, e in zip(sizes, ends)]


def split(array: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Cut ``array`` along its first axis into contiguous shards of ``sizes``."""
    if sum(sizes) != len(array):
        raise MultidevError(f"shard sizes add up to {sum(sizes)} but the batch has {len(array)} rows")
    return [array[a:b] for a, b in shard_bounds(sizes)]


@dataclass(frozen=True)
class Shards:
    """A minibatch cut by the core, one host array per device in device order: all an engine places.

    The core applies the split rule once, here, so no engine cuts rows and
    every engine holds exactly the same samples on the same device.
    """

    x: tuple[np.ndarray, ...]
    y: Optional[tuple[np.ndarray, ...]]  # None: no labels (prediction)
    #: in a group of processes: every device's shard size, rank-major, and this process's first device among them
    group_sizes: Optional[tuple[int, ...]] = None
    offset: int = 0
    #: rows of the whole update when it is accumulated over micro-batches (None: this minibatch alone)
    whole: Optional[int] = None
    #: training only, for a model with Dropout: each Dropout node's multipliers (0 or 1 / (1 - p), the run's
    #: dtype), one array per device with its shard's rows (multidev.rules.dropout); None: no Dropout applies
    masks: Optional[Mapping[str, tuple[np.ndarray, ...]]] = None

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(part) for part in self.x)

    @property
    def total(self) -> int:
        """Rows held by this process's devices."""
        return sum(self.sizes)

    @property
    def batch(self) -> int:
        """B, the whole update over every process and micro-batch: each shard's loss sum is divided by it."""
        if self.whole is not None:
            return self.whole
        return sum(self.group_sizes) if self.group_sizes is not None else self.total

    @property
    def active(self) -> list[int]:
        """This process's devices with a non-empty shard: the only ones that run a step (contract: Split)."""
        return [i for i, n in enumerate(self.sizes) if n > 0]

    @property
    def group_active(self) -> list[int]:
        """Every device of the group with a non-empty shard, numbered rank-major."""
        sizes = self.group_sizes if self.group_sizes is not None else self.sizes
        return [i for i, n in enumerate(sizes) if n > 0]

    def own(self, devices: Sequence[int]) -> list[int]:
        """Which of these devices of the group (rank-major) are this process's, as its own device indices."""
        return [i - self.offset for i in devices if 0 <= i - self.offset < len(self.x)]


def cut(x: np.ndarray, y: Optional[np.ndarray], sizes: Sequence[int]) -> Shards:
    """The minibatch ``(x, y)`` cut into contiguous shards of ``sizes`` (from :func:`shard_sizes`)."""
    return Shards(tuple(split(x, sizes)), None if y is None else tuple(split(y, sizes)))


def cut_for_process(x: np.ndarray, y: Optional[np.ndarray], index: np.ndarray, sizes: Sequence[int], rank: int,
                    devices: int) -> Shards:
    """Process ``rank``'s shards of the minibatch ``x[index]``, cut by ``sizes`` over every device, rank-major.

    Only this process's rows are read; the other processes' sizes come along,
    because the loss weights (n_i / B) and the running-statistics rule need them.
    """
    first = rank * devices
    start = int(sum(sizes[:first]))
    mine = list(sizes[first:first + devices])
    rows = index[start:start + sum(mine)]
    local = cut(x[rows], None if y is None else y[rows], mine)
    return Shards(local.x, local.y, tuple(int(s) for s in sizes), first)


A = TypeVar("A")


P = TypeVar("P")


class Placed(list, Generic[P]):  # type: ignore[type-arg]
    """An engine's placed shards in device order (a list), with the core's cut they came from.

    In a group of processes a step needs more than its own shards: the whole
    batch B and which devices of other processes hold rows (``host``).
    """

    def __init__(self, parts: Sequence[P], host: Shards) -> None:
        super().__init__(parts)
        self.host = host


@dataclass(frozen=True)
class DeviceShard(Generic[A]):
    """One device's shard once an engine placed it, in the framework's own array type."""

    x: A
    y: Optional[A]  # None: no labels
    size: int       # rows; 0 for a device that sits the step out
