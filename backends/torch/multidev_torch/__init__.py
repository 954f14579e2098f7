"""The PyTorch engine of multidev, registered under ``multidev.backends`` as ``torch``.

The modules every engine has, under the same names (put one beside another
engine's to compare): ``backend`` (the engine object the entry point returns),
``devices`` (multidev's devices as torch devices), ``model`` (any model
definition from torch's own layers, under the canonical names), ``batchnorm`` (the contract's BatchNorm,
local or sync), ``parallel`` (the replicas: place, step, AllReduce, state),
``optimizers`` (the core's optimizers as ``torch.optim``'s, their state in
canonical names), ``sharding`` (``--shard``: each device's rows of the state, ZeRO's
stages) and ``distributed`` (one process per device: ``launch``, ``join``,
``leave``, ``all_sum``).

torch's own: ``cpu_layout`` (NCHW or NHWC memory on CPU devices, shipped per CPU kind)
and ``gpu`` (cuDNN's algorithm timing and channels-last memory on a GPU); the model's
``windows`` (convolutions' and pools' padding, worked out once per node) and
``tokens`` (a transformer's class token, position embedding and attention,
their weights under the language's names); ``fsdp`` (a sharded job of one
device per process through PyTorch's FSDP2).
"""

from .backend import TorchBackend

__all__ = ["TorchBackend"]
