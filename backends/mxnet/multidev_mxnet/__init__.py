"""The MXNet Gluon engine of multidev, registered under ``multidev.backends`` as ``mxnet``.

Importing this package imports MXNet (through :mod:`.runtime`, which first
fixes the CPU thread count and numpy 1.26 compatibility); ``import multidev``
alone never does.
"""

from .backend import MXNetBackend

__all__ = ["MXNetBackend"]
