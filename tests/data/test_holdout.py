"""The seeded held-out part: each class its share, none left out of training, the same for every reader."""

import numpy as np
import pytest

from multidev.data import arrays
from multidev.data.holdout import stratified
from multidev.errors import MultidevError


def counted(y, rows):
    return np.bincount(y[rows], minlength=int(y.max()) + 1).tolist()


def test_each_class_holds_out_its_share():
    y = np.random.default_rng(0).permutation(np.repeat([0, 1, 2, 3], [50, 30, 15, 5]))
    train, test = stratified(y, 0.2, seed=0)
    assert counted(y, test) == [10, 6, 3, 1] and counted(y, train) == [40, 24, 12, 4]
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(100))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)


def test_a_small_uneven_set_trains_every_class_and_tests_as_many_as_it_can():
    y = np.repeat(np.arange(7), [5, 4, 3, 2, 2, 1, 1])  # 18 samples, 7 classes, two of one sample
    train, test = stratified(y, 0.2, seed=0)
    assert len(test) == 4 and set(y[train]) == set(range(7)) and len(set(y[test])) == 4
    assert not {5, 6} & set(y[test].tolist())  # a class's only sample trains
    train, test = stratified(y, 0.5, seed=0)
    assert len(test) == 9 and set(y[train]) == set(range(7)) and set(y[test]) == {0, 1, 2, 3, 4}


def test_seeded():
    y = np.arange(60) % 4
    assert all(np.array_equal(a, b) for a, b in zip(stratified(y, 0.25, 3), stratified(y, 0.25, 3)))
    assert not np.array_equal(stratified(y, 0.25, 3)[1], stratified(y, 0.25, 4)[1])


def test_arrays_hold_out_by_class():
    y = np.repeat(np.arange(7), [4, 3, 3, 2, 2, 2, 2])
    x = np.random.default_rng(1).integers(0, 256, (18, 1, 4, 4), dtype=np.uint8)
    data = arrays(x, y, test_fraction=0.4)
    assert sorted(data.y_test.tolist()) == list(range(7)) and set(data.y_train) == set(range(7))
    train, test = stratified(y, 0.4, 0)
    assert np.array_equal(data.x_test, x[test] / np.float32(255))


def test_a_set_that_cannot_spare_a_test_set_is_one_line():
    with pytest.raises(MultidevError, match=r"^7 training samples of 7 classes cannot spare a test set and keep "
                       r"every class in training: give test samples or more data$"):
        stratified(np.arange(7), 0.2, 0)
    with pytest.raises(MultidevError, match=r"^2 training samples cannot spare a test set"):
        stratified(np.zeros(2, np.int64), 0.9, 0)
    with pytest.raises(MultidevError, match=r"the test fraction must be in \(0, 1\)"):
        stratified(np.arange(10) % 2, 1.0, 0)
