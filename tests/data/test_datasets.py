"""The data sets: digits real and fixed, synthetic deterministic, an unknown name refused."""

import numpy as np
import pytest

from multidev import MultidevError
from multidev.data import digits, load_dataset, synthetic


def test_digits_is_real_and_fixed():
    a, b = digits(), digits()
    assert a.x_train.shape[1:] == (1, 8, 8) and len(a.x_train) + len(a.x_test) == 1797
    assert len(a.x_test) == 360 and np.array_equal(a.y_test, b.y_test)
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0
    assert np.bincount(a.y_test).min() >= 35  # stratified


def test_synthetic_is_a_function_of_its_seed():
    a, b, other = synthetic(), synthetic(), synthetic(seed=1)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert not np.array_equal(getattr(a, name), getattr(other, name)), name


def test_unknown_dataset():
    with pytest.raises(MultidevError, match="unknown data set"):
        load_dataset("cifar")
