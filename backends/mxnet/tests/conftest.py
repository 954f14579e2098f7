"""What the MXNet engine's own tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def bf16(engine):
    """The engine, where this CPU's oneDNN computes bfloat16; otherwise the test is skipped with the reason."""
    from multidev_mxnet import bf16_support

    if "bf16" not in engine.capabilities:
        pytest.skip(f"mxnet bf16 {bf16_support.bf16_note()}")
    return engine
