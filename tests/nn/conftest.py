"""Fixtures of the model-language tests: torchvision's model builders, where torchvision is installed."""

import importlib.util
import sys

import pytest

#: the schemas of the two operators torchvision's Python code registers fakes for on import (its csrc/ops)
TORCHVISION_OPS = {"nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                   "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"}


def _import_torchvision(torch):
    """torchvision, with its C++ operators declared first where its binary does not match this torch.

    A torchvision wheel installed beside another torch build (``pip install
    --no-deps``) fails on import (``operator torchvision::nms does not
    exist``); its models are pure Python, so declaring the schemas its import
    registers fakes for is enough to build and export them.
    """
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


@pytest.fixture(scope="session")
def torchvision_models():
    """``torchvision.models``; the test is skipped where torch or torchvision is not installed."""
    torch = pytest.importorskip("torch", reason="torch is not installed: no network to export")
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed (pip install --no-deps torchvision, beside this torch)")
    return _import_torchvision(torch).models
