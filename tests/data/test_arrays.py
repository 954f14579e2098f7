"""The user's arrays and .npz files: put in the core's layout, checked once, one line for bad data."""

import re

import numpy as np
import pytest

from multidev.data import arrays, npz
from multidev.errors import MultidevError
from multidev.testing.fake import FakeEngine
from multidev.training.api import train


def images(n=40, shape=(6, 6, 3), seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    y[:3] = [0, 1, 2]
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8), y


def test_nhwc_uint8_images_become_nchw_floats_in_0_1():
    x, y = images()
    data = arrays(x, y, layout="NHWC")
    assert data.shape == (3, 6, 6) and data.x_train.dtype == np.float32 and data.num_classes == 3
    assert len(data.x_train) + len(data.x_test) == 40 and len(data.x_test) == 8  # a seeded fifth held out
    whole = np.concatenate([data.x_train, data.x_test])
    assert whole.min() >= 0 and whole.max() <= 1
    again = arrays(x, y, layout="NHWC")
    assert np.array_equal(again.x_test, data.x_test)  # the same test set every run


def test_feature_vectors_and_given_test_arrays():
    rng = np.random.default_rng(1)
    data = arrays(rng.normal(size=(30, 5)), np.arange(30) % 4, rng.normal(size=(6, 5)), np.arange(6) % 4)
    assert data.shape == (5,) and data.num_classes == 4 and len(data.x_test) == 6


@pytest.mark.parametrize("args, says", [
    ((np.zeros((4, 6, 6)), [0, 1, 0, 1]), "x_train has shape (4, 6, 6): give images (N, C, H, W)"),
    ((np.zeros((4, 3)), [0, 1, 0]), "y_train has shape (3,) for 4 samples"),
    ((np.zeros((4, 3)), [0.0, 1.0, 0.0, 1.0]), "y_train holds float64 values: labels must be whole numbers"),
    ((np.zeros((4, 3)), [0, -1, 0, 1]), "y_train holds the label -1"),
    ((np.array([[0.0, np.nan]] * 4), [0, 1, 0, 1]), "x_train holds NaN or infinite values (first at row 0)"),
    ((np.zeros((4, 3)), [0, 2, 0, 2]), "the training labels never hold class 1 of 0..2"),
    ((np.zeros((0, 3)), []), "x_train is empty"),
])
def test_bad_data_is_one_line(args, says):
    with pytest.raises(MultidevError, match=re.escape(says)):
        arrays(*args)


def test_an_npz_file_gives_the_run_the_arrays_give(tmp_path):
    x, y = images(48, (1, 8, 8))
    np.savez(tmp_path / "mine.npz", x_train=x, y_train=y)
    from_file = train(FakeEngine(), model="mlp", dataset=str(tmp_path / "mine.npz"), epochs=1, batch_size=8)
    in_memory = train(FakeEngine(), model="mlp", dataset=arrays(x, y), epochs=1, batch_size=8)
    assert from_file.epochs[0].loss == in_memory.epochs[0].loss and from_file.dataset == "mine"
    assert npz(tmp_path / "mine.npz").num_classes == 3


def test_an_npz_file_without_training_arrays_is_one_line(tmp_path):
    np.savez(tmp_path / "bad.npz", images=np.zeros((2, 3)))
    with pytest.raises(MultidevError, match="holds images; it needs x_train and y_train"):
        npz(tmp_path / "bad.npz")


def test_images_whose_last_axis_looks_like_channels_get_a_hint():
    x, y = np.zeros((10, 16, 16, 3), np.uint8), np.arange(10) % 2
    with pytest.warns(UserWarning, match=r"x_train has shape \(10, 16, 16, 3\): its last axis looks like colour "
                                         r"channels; if it is, give layout='NHWC'"):
        arrays(x, y)
    assert arrays(x, y, layout="NHWC").shape == (3, 16, 16)


def test_image_size_on_arrays_is_refused_rather_than_ignored(tmp_path):
    from multidev.data import load_dataset

    np.savez(tmp_path / "d.npz", x_train=np.zeros((8, 4), np.float32), y_train=np.arange(8) % 2)
    for name in ("digits", str(tmp_path / "d.npz")):
        with pytest.raises(MultidevError, match=f"--image-size is for a folder of images; {re.escape(name)} holds "
                                                f"arrays"):
            load_dataset(name, image_size=(28, 28))


def test_a_test_class_the_training_set_lacks_is_named_as_such():
    x = np.zeros((8, 4), np.float32)
    with pytest.raises(MultidevError, match=r"the test labels hold class 3, the training labels only 0\.\.1"):
        arrays(x, np.arange(8) % 2, x, np.arange(8) % 4)


def test_a_file_named_npz_that_is_no_zip_is_named_as_such(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(3))
    (tmp_path / "x.npy").rename(tmp_path / "not.npz")
    with pytest.raises(MultidevError, match=r"not\.npz is not a \.npz file \(a zip of \.npy arrays\): write it with "
                                            r"numpy\.savez"):
        npz(tmp_path / "not.npz")
