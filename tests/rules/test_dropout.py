"""The core's Dropout masks: a function of (seed, epoch, update, node, position, index) and nothing else."""

import numpy as np
import pytest

from multidev.rules.dropout import multipliers, shard_masks, uniforms

SITES = [("drop1", 0.5, (3, 4, 4)), ("head.drop", 0.25, (10,))]


def test_k_devices_get_the_rows_one_device_gets():
    one = shard_masks(SITES, 7, 2, 5, 0, [13])
    for sizes in ([7, 6], [5, 0, 8], [4, 3, 3, 3]):
        cut = shard_masks(SITES, 7, 2, 5, 0, sizes)
        for name, _, _ in SITES:
            assert [len(m) for m in cut[name]] == sizes
            assert np.array_equal(np.concatenate(cut[name]), one[name][0])


def test_a_process_or_micro_batch_starting_later_gets_its_own_rows():
    whole = shard_masks(SITES, 1, 1, 3, 0, [20])["drop1"][0]
    later = shard_masks(SITES, 1, 1, 3, 12, [5, 3])["drop1"]  # rows 12..19 of the update
    assert np.array_equal(np.concatenate(later), whole[12:])


@pytest.mark.parametrize("change", ["seed", "epoch", "update", "node"])
def test_every_key_changes_the_mask(change):
    key = dict(seed=0, epoch=1, update=1, node="drop1")
    other = {**key, change: "drop2" if change == "node" else 2}
    a = uniforms(**key, positions=np.arange(4), size=50)
    b = uniforms(**other, positions=np.arange(4), size=50)
    assert not np.array_equal(a, b)


def test_multipliers_keep_a_fraction_one_minus_p_scaled_to_keep_the_mean():
    m = multipliers(3, 1, 1, "drop", 0.3, (1000,), np.arange(64), np.float32)
    assert m.dtype == np.float32 and set(np.unique(m)) == {np.float32(0), np.float32(1) / np.float32(0.7)}
    assert abs((m > 0).mean() - 0.7) < 0.01
    assert multipliers(3, 1, 1, "drop", 0.0, (5,), np.arange(3)).min() == 1  # p = 0 drops nothing


def test_uniforms_look_uniform():
    u = uniforms(0, 1, 1, "x", np.arange(100), 1000).ravel()
    assert 0 <= u.min() and u.max() < 1
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert counts.min() > 0.97 * len(u) / 10 and counts.max() < 1.03 * len(u) / 10
