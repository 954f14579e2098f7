"""The JAX engine of multidev (Flax + Optax), registered under ``multidev.backends`` as ``jax``.

The modules every engine has, under the same names (put one beside another
engine's to compare): ``backend`` (the engine object the entry point returns),
``devices`` (multidev's devices as JAX devices, the mesh, virtual CPU
devices), ``model`` (any ``multidev.nn`` definition under the canonical names),
``batchnorm`` (the contract's BatchNorm, local or sync), ``parallel`` (the
replicas: place, step, state), ``optimizers`` (the core's optimizers as optax
transformations, their state in canonical names) and ``distributed`` (one
process per device: ``launch``, ``join``, ``leave``, ``all_sum``).

JAX's own: ``steps`` (the per-device code in ``shard_map``, whose gradient is
the AllReduce), ``layout`` (canonical arrays to Flax variables and back),
``conv`` (XLA:CPU's slow tiny convolutions as a matrix product), ``compiled``
(ahead-of-time compilation, timed) and ``compile_cache`` (JAX's persistent
compilation cache).
"""

from .backend import JaxBackend

__all__ = ["JaxBackend"]
