"""The NumPy reference engine of multidev, registered under ``multidev.backends`` as ``numpy``.

Everything is written out by hand (forward, backward, the AllReduce), so this
package doubles as the template for a third-party engine: copy it, rename it,
swap the NumPy arithmetic for your framework's.
"""

from .backend import NumpyBackend

__all__ = ["NumpyBackend"]
