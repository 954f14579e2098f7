"""Frameworks loaded as a plain user of them loads them, for the hand-written sides of the benchmarks (MXNet on
numpy 1.24+, torchvision beside a torch build it was not made for)."""

from __future__ import annotations


def load_mxnet():
    """MXNet 1.9.1 as the engine loads it on numpy 1.24+ (the ``numpy.bool`` alias it reads put back for the import
    alone): the engine's public door. With ``DMLC_ROLE`` naming a scheduler or server, MXNet serves at import, then
    exits."""
    from multidev_mxnet import load_mxnet as engine_load
    return engine_load()


#: the schemas of the two operators torchvision's Python code registers fakes for on import (its csrc/ops)
TORCHVISION_OPS = {"nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                   "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"}


def load_torchvision():
    """torchvision as the tests load it (tests/nn/conftest.py): a wheel installed ``--no-deps`` beside another torch
    build fails on import (``operator torchvision::nms does not exist``), and its models are pure Python, so the
    schemas its import registers fakes for are declared first where that happens."""
    import sys

    import torch

    try:
        import torchvision
        return torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the half-imported package
    for op, schema in TORCHVISION_OPS.items():
        torch.library.define(f"torchvision::{op}", schema)
    import torchvision
    return torchvision
