"""The JAX engine of multidev (Flax + Optax), registered under ``multidev.backends`` as ``jax``."""

from .backend import JaxBackend

__all__ = ["JaxBackend"]
