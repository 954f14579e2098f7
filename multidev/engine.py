"""Everything an engine needs from the core, in one place: engines import from here alone.

The protocols an engine implements, the types it is handed, the contract's
constants and the shared rules it may call. Anything else in ``multidev`` is
the core's own business and may change without notice to engine authors.
"""

from __future__ import annotations

from multidev.engines.activity import doing
from multidev.engines.capabilities import CAPABILITIES
from multidev.engines.choices import Kept as KeptChoices
from multidev.engines.choices import cache_home, cpu_tag, pinned_form
from multidev.engines.cpu_flags import cpu_flags
from multidev.engines.cpu_kind import this_cpu_kind
from multidev.engines.idioms import MultiProcess, ReplicaStates, WaitedSteps, labels, predictions
from multidev.engines.lockstep import AllGather, combine_moments, run_lockstep
from multidev.engines.protocol import (Accumulates, Backend, BatchT, MultiProcessBackend, OptimizerState,
                                       PendingStats, PlansCpuDevices, QueuesSteps, Replicas, Setup, StepStats,
                                       plan_cpu_devices)
from multidev.engines.shipped import TRAIT_WORDS, kind_table, network_traits, trait_note
from multidev.errors import MultidevError, PeerLost, first_line
from multidev.nn.layers import LAYERS, LN_EPS
from multidev.nn.zoo import Block, resnet18_blocks
from multidev.processes.group import ProcessGroup
from multidev.processes.hostsum import HostSum
from multidev.processes.rowgather import RowGather
from multidev.processes.faults import JobStopped, Restart, restart, restart_count, will_restart
from multidev.processes.launch import Launch, parse_master
from multidev.processes.spawn import GRACE, Helper, cause, spawn, worker_failed
from multidev.processes.threads import usable_cores
from multidev.rules.batchnorm import BN_EPS, BN_MOMENTUM, running_statistic, statistic_sources
from multidev.rules.devices import Device
from multidev.rules.models import ModelSpec, Param, State
from multidev.rules.optimizers import STEP, Optimizer, check_state, slot_name
from multidev.rules.precision import DTYPES, PRECISIONS
from multidev.rules.sharding import LEVELS, owned_rows, padded_rows, sharded_parts
from multidev.rules.split import DeviceShard, Placed, Shards

__all__ = [
    "Accumulates", "AllGather", "BN_EPS", "BN_MOMENTUM", "Backend", "BatchT", "Block", "CAPABILITIES", "cause",
    "DTYPES", "Device", "DeviceShard", "Helper", "LAYERS", "LN_EPS", "Launch", "ModelSpec", "MultiProcessBackend",
    "MultidevError", "Optimizer", "OptimizerState", "PendingStats", "PlansCpuDevices", "PRECISIONS", "HostSum", "Param",
    "Placed", "ProcessGroup", "QueuesSteps", "RowGather", "STEP", "plan_cpu_devices",
    "check_state", "slot_name", "Replicas", "Setup", "Shards", "State", "StepStats", "combine_moments",
    "resnet18_blocks", "run_lockstep", "running_statistic", "spawn", "statistic_sources", "worker_failed",
    # restarts after a fault and signals passed on, for an engine whose framework brings its own launcher
    "GRACE", "JobStopped", "PeerLost", "Restart", "parse_master", "restart", "restart_count", "will_restart",
    # idioms every engine shares (multidev.engines.idioms; first_line from multidev.errors), and the cores a
    # process may run on and the CPU's feature flags
    "MultiProcess", "ReplicaStates", "WaitedSteps", "cpu_flags", "first_line", "labels", "predictions", "usable_cores",
    # forms chosen by timing them on this CPU, kept per CPU kind (multidev.engines.choices)
    "KeptChoices", "cache_home", "cpu_tag", "pinned_form",
    # forms shipped per CPU kind, per kind of network where one decides (multidev.engines.shipped)
    "TRAIT_WORDS", "kind_table", "network_traits", "this_cpu_kind", "trait_note",
    # what the engine is busy with while a step takes long (compiling, timing forms): the progress bar shows it
    "doing",
    # the sharding rule (contract: Sharding): which rows of each array a device owns at which level
    "LEVELS", "owned_rows", "padded_rows", "sharded_parts",
]
