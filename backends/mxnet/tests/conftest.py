"""What the MXNet engine's own tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def bf16(engine):
    """The engine, where this CPU's oneDNN computes bfloat16; otherwise the test is skipped with the reason."""
    from multidev_mxnet import cpu

    if "bf16" not in engine.capabilities:
        pytest.skip(f"mxnet bf16 {cpu.bf16_note()}")
    return engine
