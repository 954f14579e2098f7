"""Augmentation drawn by the core: a function of (seed, epoch, sample index), whoever reads the row."""

import numpy as np
import pytest

from multidev.errors import MultidevError
from multidev.rules.augment import augment, draws, padding, parse_augment


def images(n=64, c=2, h=8, w=8, seed=0):
    return np.random.default_rng(seed).random((n, c, h, w)).astype(np.float32)


def test_parse_augment_checks_and_orders():
    assert parse_augment("flip,crop") == ("crop", "flip") and parse_augment(None) == () and parse_augment("") == ()
    assert parse_augment(["flip"]) == ("flip",)
    with pytest.raises(MultidevError, match="unknown augmentation 'rotate': choose from crop, flip"):
        parse_augment("crop,rotate")


def test_padding_follows_the_image_size():
    assert (padding(32), padding(28), padding(8), padding(3)) == (4, 3, 1, 1)


def test_a_sample_is_augmented_alike_whatever_rows_are_read_with_it():
    x = images()
    index = np.arange(64)
    whole = augment(x, index, ("crop", "flip"), seed=3, epoch=2)
    order = np.random.default_rng(1).permutation(64)
    for part in np.array_split(order, 5):  # other minibatches, other order, other process
        assert np.array_equal(augment(x[part], part, ("crop", "flip"), seed=3, epoch=2), whole[part])


def test_draws_change_with_seed_and_epoch_and_spread_evenly():
    index = np.arange(4000)
    dy, dx, flip = draws(0, 1, index, pad=3)
    assert set(np.unique(dy)) == set(range(7)) and set(np.unique(dx)) == set(range(7))
    assert 0.45 < flip.mean() < 0.55
    for other in (draws(1, 1, index, 3), draws(0, 2, index, 3)):
        assert (other[0] != dy).mean() > 0.5 and (other[2] != flip).mean() > 0.3


def test_crop_is_a_shifted_window_of_the_zero_padded_image_and_flip_a_mirror():
    x = images(n=16)
    index = np.arange(100, 116)
    dy, dx, flip = draws(5, 1, index, padding(8))
    cropped = augment(x, index, ("crop",), 5, 1)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for r in range(16):
        assert np.array_equal(cropped[r], padded[r, :, dy[r]:dy[r] + 8, dx[r]:dx[r] + 8])
    flipped = augment(x, index, ("flip",), 5, 1)
    assert np.array_equal(flipped[flip], x[flip][..., ::-1]) and np.array_equal(flipped[~flip], x[~flip])
    assert flip.any() and not flip.all()


def test_augmenting_feature_vectors_is_one_line():
    with pytest.raises(MultidevError, match=r"works on images .* leave --augment out"):
        augment(np.zeros((4, 10), np.float32), np.arange(4), ("flip",), 0, 1)
