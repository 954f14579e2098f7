"""The NumPy reference engine of multidev, registered under ``multidev.backends`` as ``numpy``.

Everything is written out by hand (forward, backward, the AllReduce), so this
package doubles as the template for a third-party engine: copy it, rename it,
swap the NumPy arithmetic for your framework's.

Its modules carry the names the real engines give them (backends/torch,
backends/jax, backends/mxnet): ``backend`` (the engine object the entry point
returns) and ``parallel`` (the replicas: place, step, AllReduce, state). The
rest of the common set does not apply here: ``model`` and ``batchnorm`` are
the core's ``multidev.reference`` (the arithmetic the kit's truth runs too),
a device is a replica on the host (no ``devices``), the update is plain SGD
(no ``optimizers``) and the engine runs in one process (no ``distributed``).
"""

from .backend import NumpyBackend

__all__ = ["NumpyBackend"]
