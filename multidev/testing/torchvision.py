"""torchvision's models beside a torch build its wheel was not made for, for the tests and the benchmarks.

torchvision's registry wheel is a CUDA build; installed ``--no-deps`` beside
the CPU torch its import fails (``operator torchvision::nms does not
exist``). Its models are pure Python, so declaring the schemas of the two
operators its import registers fakes for is enough to build and export them.
"""

from __future__ import annotations

import sys
from typing import Any

#: the schemas of the two operators torchvision's Python code registers fakes for on import (its csrc/ops)
TORCHVISION_OPS = {"nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                   "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"}


def load_torchvision() -> Any:
    """torchvision, with its C++ operators declared first where its binary does not match this torch."""
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
