"""BatchNorm's constants and its running-statistics rule (contract: BatchNorm).

Every engine normalises with ``BN_EPS``, moves its running statistics by
``BN_MOMENTUM`` and, after a step, gives every replica the statistics
:func:`statistic_sources` names. The arithmetic itself, in float64, is
``multidev.reference.batchnorm``.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable, Sequence, TypeVar

from multidev.errors import MultidevError

T = TypeVar("T")

# BatchNorm conventions every engine follows (docs/contract.md).
BN_EPS = 1e-5


BN_MOMENTUM = 0.1  # running = (1 - m) * running + m * batch statistic (biased variance)


BATCHNORM_MODES = ("local", "sync")


def check_batchnorm(mode: str) -> None:
    """The one check of a BatchNorm mode."""
    if mode not in BATCHNORM_MODES:
        raise MultidevError(f"unknown batchnorm {mode!r}: choose one of {', '.join(BATCHNORM_MODES)}")


def statistic_sources(active: Sequence[int], sync: bool) -> tuple[list[int], float]:
    """The rule for the running statistics every replica takes after a step (docs/contract.md, BatchNorm).

    Returns the devices whose own updated statistics make the new value, and
    the factor their sum is multiplied by. Sync: every active device holds the
    whole batch's, so the first one alone. Local: the equal-weight mean over
    the active devices (an empty shard saw nothing). An engine with a sum
    collective (MXNet's kvstore) sums these sources with it and scales.
    """
    sources = list(active[:1]) if sync or len(active) == 1 else list(active)
    return sources, 1.0 / len(sources)


def running_statistic(values: Sequence[T], active: Sequence[int], sync: bool,
                      add: Callable[[list[T]], T] = lambda xs: functools.reduce(operator.add, xs)) -> T:
    """:func:`statistic_sources` applied to one statistic's per-device values."""
    sources, _ = statistic_sources(active, sync)
    return values[sources[0]] if len(sources) == 1 else add([values[i] for i in sources]) / len(sources)
