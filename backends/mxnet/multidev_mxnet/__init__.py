"""The MXNet Gluon engine of multidev, registered under ``multidev.backends`` as ``mxnet``.

Importing this package changes nothing in the process and does not load MXNet:
the engine loads it on first use (see :mod:`.runtime`).

The modules every engine has, under the same names (put one beside another
engine's to compare): ``backend`` (the engine object the entry point returns),
``devices`` (multidev's devices as MXNet contexts), ``model`` (any
``multidev.nn`` definition from Gluon's layers, under the canonical names),
``batchnorm`` (the contract's BatchNorm, local or sync), ``parallel`` (the
replicas: place, step, kvstore AllReduce, state), ``optimizers`` (the core's
optimizers as Gluon optimizers, their state in canonical names),
``sharding`` (``--shard``: each device's rows of the state, ZeRO's stages)
and ``distributed`` (one process per device: ``launch``, ``join``,
``leave``, ``all_sum``).

MXNet's own: ``windows`` (convolutions and pools whose padding MXNet's
operators cannot take alone, as the torch engine's module of that name),
``shapes`` (reshapes, transposes, slices, concatenations, batched matrix
products and softmax along any axis), ``tokens`` (a transformer's class
token, position embedding and attention as Gluon blocks), ``rows`` (a
network compiled for a full shard's rows, so that attention's products are
grouped convolutions: shorter shards padded to it, longer ones in pieces),
``onednn`` (float32's LayerNorm, ReLU6 and global pooling as operators
oneDNN runs), ``runtime`` (loading MXNet on first use, and its thread count),
``transfers`` (large copies to and from NumPy as MXNet's operators, which
keep OpenMP off the calling thread), ``rowgather`` (a sharded job's rows
crossing its processes through the gradient sum's shared memory),
``serve`` (``python -m multidev_mxnet.serve``: the job's scheduler or a
server of its kvstore) and ``bf16_support`` (whether this CPU's oneDNN computes
bfloat16, read from its flags without loading MXNet).
"""

from .backend import MXNetBackend
from .runtime import mxnet as load_mxnet  # MXNet as the engine loads it, for Gluon code beside it (benchmarks)

__all__ = ["MXNetBackend", "load_mxnet"]
