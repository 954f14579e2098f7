"""multidev: one API for data-parallel training on PyTorch, JAX and MXNet.

Importing multidev imports no framework: engines load when asked for.
"""

from multidev.comparison.compare import compare
from multidev.comparison.runs import Outcome
from multidev.engines.capabilities import CAPABILITIES
from multidev.engines.protocol import Backend, Replicas, Setup, StepStats, replicate
from multidev.engines.registry import installed as installed_backends
from multidev.engines.registry import load_backend
from multidev.errors import BackendNotInstalled, MultidevError, UserCodeError
from multidev.outputs.checkpoint import load as load_checkpoint
from multidev.outputs.checkpoint import save as save_checkpoint
from multidev.outputs.result import EpochRecord, Result
from multidev.processes.group import ProcessGroup
from multidev.rules.devices import Device, resolve_devices
from multidev.rules.models import MODELS, ModelSpec
from multidev.rules.split import Shards, cut, shard_bounds, shard_sizes, split
from multidev.settings.run import DEFAULTS, Settings
from multidev.training.api import train
from multidev.training.evaluate import evaluate
from multidev.training.interrupt import Interrupted

__version__ = "0.1.0"

__all__ = [
    "Backend", "BackendNotInstalled", "CAPABILITIES", "DEFAULTS", "Device", "EpochRecord", "Interrupted", "MODELS",
    "ModelSpec", "MultidevError", "Outcome", "ProcessGroup", "Replicas", "Result", "Settings", "Setup", "Shards",
    "StepStats", "compare", "cut", "evaluate", "installed_backends", "load_backend", "load_checkpoint", "replicate",
    "resolve_devices", "save_checkpoint", "shard_bounds", "shard_sizes", "split", "train", "UserCodeError",
]
