"""The PyTorch engine of multidev, registered under ``multidev.backends`` as ``torch``."""

from .backend import TorchBackend

__all__ = ["TorchBackend"]
