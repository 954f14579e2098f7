"""A folder of .npy files: mapped, not loaded; the same run as the arrays; a Python set reaches workers so."""

import numpy as np
import pytest

from multidev.data import arrays, npy
from multidev.data.rows import Pixels
from multidev.errors import MultidevError
from multidev.outputs import checkpoint as ckpt
from multidev.testing.fake import FakeEngine
from multidev.training.api import train


def saved(folder, n=40, test=True, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, 6, 6, 2)).astype(dtype)
    y = np.arange(n) % 3
    folder.mkdir()
    np.save(folder / "x_train.npy", x)
    np.save(folder / "y_train.npy", y)
    if test:
        np.save(folder / "x_test.npy", x[:10])
        np.save(folder / "y_test.npy", y[:10])
    return x, y


def test_samples_are_read_on_demand_as_arrays_gives_them(tmp_path):
    x, y = saved(tmp_path / "set")
    data = npy.folder(tmp_path / "set", layout="NHWC")
    assert isinstance(data.x_train, Pixels) and isinstance(data.x_train.stored, npy.RowFile)
    want = arrays(x, y, x[:10], y[:10], layout="NHWC")
    assert data.shape == want.shape == (2, 6, 6) and data.num_classes == 3
    assert np.array_equal(data.x_train[np.array([5, 0, 39])], want.x_train[[5, 0, 39]])


def test_a_row_file_reads_any_rows_in_the_order_asked(tmp_path):
    x = np.arange(50 * 3 * 2, dtype=np.float64).reshape(50, 3, 2)
    np.save(tmp_path / "x.npy", x)
    rows = npy.RowFile(tmp_path / "x.npy")
    for index in ([3, 4, 5, 9, 0, 1, 49], [7], [], [2, 2, 1], list(range(50))[::-1], np.arange(50)):
        assert np.array_equal(rows[np.asarray(index, dtype=np.int64)], x[np.asarray(index, dtype=np.int64)])
    with pytest.raises(IndexError):
        rows[np.array([50])]
    np.save(tmp_path / "f.npy", np.asfortranarray(np.zeros((4, 3))))
    with pytest.raises(MultidevError, match=r"f\.npy is not a readable \.npy file"):
        npy._open(tmp_path / "f.npy", mapped=True)


def test_without_test_files_the_arrays_held_out_fraction(tmp_path):
    x, y = saved(tmp_path / "set", test=False)
    data, want = npy.folder(tmp_path / "set", "NHWC"), arrays(x, y, layout="NHWC")
    assert np.array_equal(data.y_test, want.y_test)
    assert np.array_equal(data.x_test[np.arange(len(want.x_test))], want.x_test)


def test_the_same_run_as_the_arrays(tmp_path):
    x, y = saved(tmp_path / "set")
    kwargs = dict(model="mlp", batch_size=8, epochs=2, devices=2, dtype="float64", layout="NHWC")
    train(FakeEngine(), dataset=str(tmp_path / "set"), checkpoint=tmp_path / "a.npz", **kwargs)
    train(FakeEngine(), dataset=arrays(x, y, x[:10], y[:10], layout="NHWC"), checkpoint=tmp_path / "b.npz",
          **kwargs)
    a, b = ckpt.load(tmp_path / "a.npz")[1], ckpt.load(tmp_path / "b.npz")[1]
    assert all(np.array_equal(a[n], b[n]) for n in a)


def test_save_folder_round_trips_a_data_set(tmp_path):
    x, y = saved(tmp_path / "set")
    data = npy.folder(tmp_path / "set", "NHWC")
    back = npy.folder(npy.save_folder(data, tmp_path / "copy"))
    assert back.shape == data.shape and np.array_equal(back.y_train, data.y_train)
    assert np.array_equal(back.x_test[np.arange(10)], data.x_test[np.arange(10)])


def test_bad_folders_are_one_line(tmp_path):
    (tmp_path / "none").mkdir()
    np.save(tmp_path / "none" / "x_train.npy", np.zeros((3, 4)))
    with pytest.raises(MultidevError, match="has no y_train.npy"):
        npy.folder(tmp_path / "none")
    x, y = saved(tmp_path / "nan", dtype=np.float32, test=False)
    bad = x.copy()
    bad[7, 1, 1, 0] = np.nan
    np.save(tmp_path / "nan" / "x_train.npy", bad)
    with pytest.raises(MultidevError, match=r"x_train .* holds NaN or infinite values \(first at row 7\)"):
        npy.folder(tmp_path / "nan")
    np.save(tmp_path / "nan" / "x_train.npy", np.zeros((40, 3, 6, 6, 1)))
    with pytest.raises(MultidevError, match=r"x_train has shape \(40, 3, 6, 6, 1\)"):
        npy.folder(tmp_path / "nan")
    np.save(tmp_path / "nan" / "x_train.npy", x)
    np.save(tmp_path / "nan" / "y_train.npy", y[:-1])
    with pytest.raises(MultidevError, match="one whole-number label per sample"):
        npy.folder(tmp_path / "nan")
