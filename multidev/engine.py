"""Everything an engine needs from the core, in one place: engines import from here alone.

The protocols an engine implements, the types it is handed, the contract's
constants and the shared rules it may call. Anything else in ``multidev`` is
the core's own business and may change without notice to engine authors.
"""

from __future__ import annotations

from .devices import Device
from .errors import MultidevError
from .lockstep import AllGather, combine_moments, run_lockstep, running_statistic, statistic_sources
from .models import BN_EPS, BN_MOMENTUM, Block, ModelSpec, Param, State, lenet_flat_features, resnet18_blocks
from .group import Launch
from .optim import STEP, Optimizer, check_state, slot_name
from .protocol import (CAPABILITIES, DTYPES, PRECISIONS, Backend, BatchT, MultiProcessBackend, OptimizerState,
                       ProcessGroup, Replicas, Setup, StepStats)
from .shard import DeviceShard, Placed, Shards
from .spawn import Helper, cause, spawn, worker_failed

__all__ = [
    "AllGather", "BN_EPS", "BN_MOMENTUM", "Backend", "BatchT", "Block", "CAPABILITIES", "cause", "DTYPES", "Device",
    "DeviceShard", "Helper", "Launch", "ModelSpec", "MultiProcessBackend", "MultidevError", "Optimizer",
    "OptimizerState", "PRECISIONS", "Param", "Placed", "ProcessGroup", "STEP", "check_state", "slot_name",
    "Replicas", "Setup", "Shards", "State", "StepStats", "combine_moments", "lenet_flat_features",
    "resnet18_blocks", "run_lockstep", "running_statistic", "spawn", "statistic_sources", "worker_failed",
]
