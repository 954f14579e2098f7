"""The JAX engine of multidev (Flax + Optax), registered under ``multidev.backends`` as ``jax``.

Data parallelism first: ``placing`` splits the minibatch (the core's shards
as one array sharded over the device mesh, padded to one length; the state
replicated, a copy on every device), ``steps`` is the step as the book
teaches it (a gradient per device in ``shard_map``, the AllReduce, the
update) and ``allreduce`` sums the gradients (``psum``; buckets between
processes). ``parallel`` holds the replicas that run them: place, train,
evaluate, state in and out.

The modules every engine has, under the same names (put one beside another
engine's to compare): ``backend`` (the engine object the entry point returns),
``devices`` (multidev's devices as JAX devices, the mesh, virtual CPU
devices), ``model`` (any ``multidev.nn`` definition under the canonical names),
``batchnorm`` (the contract's BatchNorm, local or sync), ``parallel``,
``optimizers`` (the core's optimizers as optax transformations, their state in
canonical names), ``sharding`` (``--shard``: each device's rows of the
state, ZeRO's stages on the mesh) and ``distributed`` (one process per device:
``launch``, ``join``, ``leave``, ``all_sum``).

JAX's own: ``layout`` (canonical arrays to Flax variables and back),
``shapes`` (the engine's NHWC images and the layers that read the canonical
axes: Reshape, Transpose, Slice, MatMul, Mul), ``tokens`` (a transformer's
class token, position embedding and attention, holding the core's arrays),
``layernorm`` (the exact two-pass LayerNorm, in a form XLA fuses well),
``pools`` (MaxPool2d and AvgPool2d with torch's padding; the CPU's max as
its window's taps), ``conv``
(XLA:CPU's slow tiny and depthwise convolutions as a matrix product and as
their taps), ``taps`` (the strided slices those read), ``compiled``
(ahead-of-time compilation, timed), ``compile_cache`` (JAX's persistent
compilation cache), ``kept_steps`` (compiled steps kept whole, loaded by a
later run untraced), ``shared_compile`` (one compilation for a job's
processes) and ``shared_sum`` (a job on one machine summing its gradients
through shared memory). The sub-package ``forms`` holds the forms:
ways to compute the same step that a CPU runs at different speeds, each a
``choice`` (``sums``, ``threads``, ``parts``, ``conv_inputs``), those
``shipped`` for each CPU kind, a run's ``decided`` into one value the step is
built with.
"""

from .backend import JaxBackend

__all__ = ["JaxBackend"]
