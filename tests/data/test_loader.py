"""Data order and batches (contract: Data order, Split): a function of (seed, epoch); the remainder kept."""

import numpy as np

from multidev.data import batches, epoch_order


def test_epoch_order_depends_on_seed_and_epoch_only():
    """The contract's order, default_rng([seed, epoch]).permutation(N): each epoch and each seed its own."""
    orders = {(seed, epoch): epoch_order(100, seed, epoch) for seed in (0, 3) for epoch in (1, 2)}
    for (seed, epoch), order in orders.items():
        assert np.array_equal(order, np.random.default_rng([seed, epoch]).permutation(100)), (seed, epoch)
        assert sorted(order) == list(range(100))
    assert len({tuple(order) for order in orders.values()}) == 4  # no two (seed, epoch) pairs share an order


def test_batches_keep_the_remainder():
    sizes = [len(b) for b in batches(np.arange(10), 4)]
    assert sizes == [4, 4, 2]
