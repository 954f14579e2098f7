"""The sharding rule: PyTorch's Shard(0) placement, one rule for every engine, and what each level keeps where.

Why: a sharded run changes only where arrays live, so which rows a device
owns must be one rule the engines share (as the batch split is), and it
must be the one FSDP2 already uses, so torch's own machinery keeps it.
"""

import numpy as np
import pytest

from multidev import MultidevError
from multidev.rules import sharding


@pytest.mark.parametrize("rows, devices", [(10, 4), (9, 4), (8, 4), (3, 4), (1, 2), (0, 3), (64, 1), (7, 7)])
def test_the_rule_is_torchs_shard_zero(rows, devices):
    """Each device's rows are what DTensor's Shard(0) gives it: torch.chunk's parts, then empty parts."""
    torch = pytest.importorskip("torch", reason="torch is not installed: its chunk rule is the reference")
    chunks = [len(c) for c in torch.arange(rows).chunk(devices)] if rows else []
    want = chunks + [0] * (devices - len(chunks))
    got = [end - start for start, end in sharding.owned_rows(rows, devices)]
    assert got == want
    assert sum(got) == rows and all(a <= b for a, b in sharding.owned_rows(rows, devices))
    assert max(got, default=0) == sharding.padded_rows(rows, devices)


def test_parts_gather_back_and_scalars_stay_whole():
    a = np.arange(30.0).reshape(10, 3)
    parts = sharding.shard(a, 4)
    assert [p.shape for p in parts] == [(3, 3), (3, 3), (3, 3), (1, 3)]
    assert np.array_equal(sharding.gather(parts), a)
    step = np.array(7)
    assert all(p is step for p in sharding.shard(step, 3)) and sharding.gather(sharding.shard(step, 3)) == 7


def test_each_level_shards_what_the_one_before_did_and_more():
    assert [sharding.sharded_parts(level) for level in sharding.LEVELS] == [
        {"optimizer": False, "gradients": False, "parameters": False},
        {"optimizer": True, "gradients": False, "parameters": False},
        {"optimizer": True, "gradients": True, "parameters": False},
        {"optimizer": True, "gradients": True, "parameters": True}]
    with pytest.raises(MultidevError, match="shard must be one of none, optimizer, gradients, parameters"):
        sharding.sharded_parts("zero3")


def test_a_device_holds_its_rows_bytes():
    """A (10, 3) weight and a (3,) bias in float32 on 4 devices: sharded, 36 bytes each but the last's 12 of the
    weight, and the bias's 1 row each (the fourth device none); whole, all 132 on every device."""
    shapes = {"w": (10, 3), "b": (3,), "step": ()}
    assert sharding.device_bytes(shapes, 4, 4, sharded=False) == [136] * 4
    assert sharding.device_bytes(shapes, 4, 4, sharded=True) == [36 + 4 + 4, 36 + 4 + 4, 36 + 4 + 4, 12 + 0 + 4]
    assert sum(sharding.device_bytes({"w": (10, 3)}, 8, 4, sharded=True)) == 240


def test_per_device_bytes_follow_the_level():
    from multidev.rules.sharding import per_device

    shapes = {"w": (5, 2), "b": (5,)}  # 15 numbers: rows 3 + 2 of each
    plain = per_device(shapes, 2, 8, 2, "none")
    assert plain == {"parameters": [120, 120], "gradients": [120, 120], "optimizer": [240, 240]}
    assert per_device(shapes, 2, 8, 2, "optimizer")["optimizer"] == [2 * 72, 2 * 48]
    assert per_device(shapes, 2, 8, 2, "gradients")["gradients"] == [72, 48]
    third = per_device(shapes, 1, 8, 2, "parameters", padded=True)
    assert third == {"parameters": [72, 72], "gradients": [72, 72], "optimizer": [72, 72]}
