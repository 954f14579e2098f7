"""Frameworks loaded as a plain user of them loads them, for the hand-written sides of the benchmarks (MXNet on
numpy 1.24+, torchvision beside a torch build it was not made for)."""

from __future__ import annotations


def load_mxnet():
    """MXNet 1.9.1 as the engine loads it on numpy 1.24+ (the ``numpy.bool`` alias it reads put back for the import
    alone): the engine's public door. With ``DMLC_ROLE`` naming a scheduler or server, MXNet serves at import, then
    exits."""
    from multidev_mxnet import load_mxnet as engine_load
    return engine_load()


def load_torchvision():
    """torchvision as the tests load it (``multidev.testing.torchvision``: its wheel's operators declared where it
    was built for another torch)."""
    from multidev.testing.torchvision import load_torchvision as load

    return load()
