"""The MXNet Gluon engine of multidev, registered under ``multidev.backends`` as ``mxnet``.

Importing this package changes nothing in the process and does not load MXNet:
the engine loads it on first use (see :mod:`.runtime`).
"""

from .backend import MXNetBackend

__all__ = ["MXNetBackend"]
