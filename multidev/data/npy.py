"""A folder of ``.npy`` files, memory-mapped: a set larger than memory trains, a minibatch read at a time.

``x_train.npy`` and ``y_train.npy`` (and optionally ``x_test.npy``,
``y_test.npy``), as :func:`multidev.data.arrays` takes them. The samples
are mapped, never loaded whole; each process reads the pages of its own
rows. Labels are small and read whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from multidev.data.arrays import check_kind, class_count, held_out, labels, sample_shape
from multidev.data.dataset import Dataset
from multidev.data.rows import Pixels, Taken, check_finite
from multidev.errors import MultidevError

NAMES = ("x_train", "y_train", "x_test", "y_test")


def is_npy_folder(path: str | Path) -> bool:
    return (Path(path) / "x_train.npy").is_file()


def _open(path: Path, mapped: bool) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mapped else None, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise MultidevError(f"{path} is not a readable .npy file ({exc}): write it with numpy.save") from None


def _samples(path: Path, layout: str, what: str) -> Pixels:
    stored = _open(path, mapped=True)
    check_kind(stored.dtype, what)
    sample_shape(stored.shape, layout, what)
    if len(stored) == 0:
        raise MultidevError(f"{what} ({path}) is empty: give at least one sample")
    x = Pixels(stored, layout)
    if stored.dtype.kind == "f":  # integers cannot be NaN: only float files are read through once
        check_finite(x, f"{what} ({path})")
    return x


def folder(path: str | Path, layout: str = "NCHW", *, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A data set from a folder of ``.npy`` files; without test files a seeded ``test_fraction`` held out."""
    root = Path(path)
    files = {name: root / f"{name}.npy" for name in NAMES}
    lacking = [f"{n}.npy" for n in ("x_train", "y_train") if not files[n].is_file()]
    if lacking:
        raise MultidevError(f"{root} has no {' or '.join(lacking)}: a folder of .npy files needs x_train.npy and "
                            f"y_train.npy (and optionally x_test.npy, y_test.npy)")
    if files["x_test"].is_file() != files["y_test"].is_file():
        raise MultidevError(f"{root} has only one of x_test.npy and y_test.npy: give both, or neither (a seeded "
                            f"fraction is then held out)")
    x = _samples(files["x_train"], layout, "x_train")
    y = labels(_open(files["y_train"], mapped=False), len(x), "y_train")
    if files["x_test"].is_file():
        xt = _samples(files["x_test"], layout, "x_test")
        yt = labels(_open(files["y_test"], mapped=False), len(xt), "y_test")
        if xt.shape[1:] != x.shape[1:]:
            raise MultidevError(f"x_test's samples are {xt.shape[1:]}, x_train's {x.shape[1:]}: give them one shape")
        return Dataset(root.name, x, y, xt, yt, class_count(y, yt))
    train, test = held_out(len(x), test_fraction, seed)
    return Dataset(root.name, Taken(x, train), y[train], Taken(x, test), y[test], class_count(y[train], y[test]))


def save_folder(data: Dataset, path: str | Path) -> Path:
    """``data`` written as a folder of ``.npy`` files (float32, the core's layout) that :func:`folder` reads back
    as the same numbers: how a data set made in Python reaches the processes of a job. Written in chunks, so a
    set read from files is never whole in memory."""
    from multidev.data.rows import chunks

    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    for name, x, y in (("train", data.x_train, data.y_train), ("test", data.x_test, data.y_test)):
        out = np.lib.format.open_memmap(root / f"x_{name}.npy", mode="w+", dtype=np.float32, shape=tuple(x.shape))
        for start, part in chunks(x):
            out[start:start + len(part)] = part
        out.flush()
        del out
        np.save(root / f"y_{name}.npy", np.asarray(y, dtype=np.int64))
    return root
