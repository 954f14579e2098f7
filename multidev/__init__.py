"""multidev: one API for data-parallel training on PyTorch, JAX and MXNet.

Importing multidev imports no framework: engines load when asked for.
"""

from .checkpoint import load as load_checkpoint
from .checkpoint import save as save_checkpoint
from .compare import Outcome, RunSpec, compare
from .devices import Device, resolve_devices
from .errors import BackendNotInstalled, MultidevError
from .interrupt import Interrupted
from .models import MODELS, ModelSpec
from .protocol import CAPABILITIES, Backend, ProcessGroup, Replicas, Setup, StepStats, replicate
from .registry import installed as installed_backends
from .registry import load_backend
from .result import EpochRecord, Result
from .shard import Shards, cut, shard_bounds, shard_sizes, split
from .train import DEFAULTS, evaluate, train

__version__ = "0.1.0"

__all__ = [
    "Backend", "BackendNotInstalled", "CAPABILITIES", "DEFAULTS", "Device", "EpochRecord", "Interrupted", "MODELS",
    "ModelSpec", "MultidevError", "Outcome", "ProcessGroup", "Replicas", "Result", "RunSpec", "Setup", "Shards",
    "StepStats", "compare", "cut", "evaluate", "installed_backends", "load_backend", "load_checkpoint", "replicate",
    "resolve_devices", "save_checkpoint", "shard_bounds", "shard_sizes", "split", "train",
]
