"""Data order and batches (contract: Data order, Split): a function of (seed, epoch); the remainder kept."""

import numpy as np

from multidev.data import batches, epoch_order


def test_epoch_order_depends_on_seed_and_epoch_only():
    assert np.array_equal(epoch_order(100, 3, 2), epoch_order(100, 3, 2))
    assert not np.array_equal(epoch_order(100, 3, 1), epoch_order(100, 3, 2))
    assert sorted(epoch_order(100, 3, 1)) == list(range(100))


def test_batches_keep_the_remainder():
    sizes = [len(b) for b in batches(np.arange(10), 4)]
    assert sizes == [4, 4, 2]
