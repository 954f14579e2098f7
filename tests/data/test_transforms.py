"""Normalisation and augmentation as runs see them: computed once, applied per read, the same on every reader."""

import numpy as np
import pytest

from multidev.data import synthetic
from multidev.data.rows import Pixels
from multidev.data.transforms import Transforms, channel_statistics, normalize_text, parse_normalize
from multidev.errors import MultidevError
from multidev.testing.fake import FakeEngine
from multidev.training.api import train


def test_parse_normalize_forms():
    assert parse_normalize(None) is None and parse_normalize(True) == "auto" and parse_normalize("auto") == "auto"
    assert parse_normalize("0.5,0.4/0.25,0.2") == ((0.5, 0.4), (0.25, 0.2))
    assert parse_normalize(([0.1], [2])) == ((0.1,), (2.0,))
    assert normalize_text(parse_normalize("0.5,0.4/0.25,0.2")) == "0.5,0.4/0.25,0.2"
    for bad in ("0.5", "a/b", "0.5/0", "0.1,0.2/0.3"):
        with pytest.raises(MultidevError, match="normalize"):
            parse_normalize(bad)


def test_channel_statistics_equal_numpys_over_chunks():
    x = np.random.default_rng(0).random((9000, 3, 4, 4)).astype(np.float32) * [[[[1]], [[2]], [[3]]]]
    mean, std = channel_statistics(Pixels(x))  # read in chunks of 4096 rows
    assert np.allclose(mean, x.astype(np.float64).mean(axis=(0, 2, 3)), rtol=1e-12)
    assert np.allclose(std, x.astype(np.float64).std(axis=(0, 2, 3)), rtol=1e-9)


def test_auto_normalisation_gives_the_training_set_mean_0_and_std_1_and_leaves_test_unaugmented():
    data = synthetic(n_train=64, n_test=16, shape=(2, 6, 6))
    t = Transforms.of(("flip",), "auto", data.x_train)
    train_rows = np.asarray(t.train(data.x_train, seed=0, epoch=1)[np.arange(64)], np.float64)
    assert np.allclose(train_rows.mean(axis=(0, 2, 3)), 0, atol=1e-5)  # a flip moves pixels, not statistics
    assert np.allclose(train_rows.std(axis=(0, 2, 3)), 1, atol=1e-5)
    test_rows = t.test(data.x_test)[np.arange(16)]
    assert np.array_equal(test_rows, (data.x_test - t.mean[:, None, None]) / t.std[:, None, None])
    plain = Transforms.of((), None, data.x_train)
    assert plain.train(data.x_train, 0, 1) is data.x_train and plain.test(data.x_test) is data.x_test


def test_bad_transforms_are_one_line_before_training():
    data = synthetic(n_train=32, n_test=8, shape=(2, 6, 6))
    with pytest.raises(MultidevError, match="gives 1 means for samples of 2 channels"):
        Transforms.of((), ((0.5,), (0.2,)), data.x_train)
    flat = np.zeros((8, 5), np.float32)
    with pytest.raises(MultidevError, match="works on images"):
        Transforms.of(("crop",), None, flat)
    with pytest.raises(MultidevError, match="constant"):
        Transforms.of((), "auto", np.ones((8, 1, 2, 2), np.float32))


def _trained(path, **settings):
    from multidev.outputs import checkpoint as ckpt
    data = synthetic(n_train=40, n_test=8, shape=(1, 8, 8))
    from multidev import nn
    net = nn.Sequential(nn.Conv2d(3, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2), nn.Flatten(), nn.Dense())
    kwargs = dict(model=net, dataset=data, batch_size=8, dtype="float64", epochs=2, augment="crop,flip",
                  normalize="auto", checkpoint=path)
    train(FakeEngine(), **{**kwargs, **settings})
    return ckpt.load(path)[1]


def test_augmented_runs_agree_over_device_counts_and_micro_batches(tmp_path):
    states = {name: _trained(tmp_path / f"{name}.npz", **extra) for name, extra in {
        "one": {}, "two": dict(devices=2), "three": dict(devices=3), "micro": dict(batch_size=4, accumulate=2),
        "plain": dict(augment=None)}.items()}
    one = states["one"]
    for name in ("two", "three", "micro"):
        assert all(np.allclose(states[name][n], one[n], rtol=1e-12, atol=1e-14) for n in one), name
    assert not all(np.allclose(states["plain"][n], one[n]) for n in one)  # augmentation did change the run
