"""A folder of ``.npy`` files: a set larger than memory trains, a minibatch read at a time.

``x_train.npy`` and ``y_train.npy`` (and optionally ``x_test.npy``,
``y_test.npy``), as :func:`multidev.data.arrays` takes them. The samples are
never loaded whole: :class:`RowFile` reads the rows a minibatch asks for
with ``os.pread`` (one read per run of consecutive rows), so each process
reads only its own rows and holds none of the file once they are copied
out: a memory map's pages would stay in the process's resident memory,
growing with the set. Labels are small and read whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

from multidev.data.arrays import check_kind, class_count, labels, sample_shape
from multidev.data.dataset import Dataset
from multidev.data.holdout import stratified
from multidev.data.rows import Pixels, Taken, check_finite, chunks
from multidev.errors import MultidevError

NAMES = ("x_train", "y_train", "x_test", "y_test")
#: the classes' names, where the data set came with them (JSON, in label order)
CLASSES = "classes.json"


def is_npy_folder(path: str | Path) -> bool:
    return (Path(path) / "x_train.npy").is_file()


class RowFile:
    """The rows of a C-ordered ``.npy`` file, read on demand: ``shape``, ``dtype`` and ``file[index]``."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(f))
            self.offset = f.tell()
        if fortran or dtype.hasobject or not shape:
            raise ValueError("not an array of numbers in C order, one row per sample")
        self.path, self.shape, self.dtype = path, tuple(shape), dtype
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        self._fd = os.open(path, os.O_RDONLY)

    def __len__(self) -> int:
        return self.shape[0]

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        out = np.empty((len(index), *self.shape[1:]), self.dtype)
        if len(index) == 0:
            return out
        order = np.argsort(index, kind="stable")
        rows = index[order]
        if rows[0] < 0 or rows[-1] >= len(self):
            raise IndexError(f"rows {rows[0]}..{rows[-1]} of {self.path}, which has {len(self)}")
        flat = out.reshape(len(index), -1).view(np.uint8)
        starts = np.flatnonzero(np.diff(rows, prepend=rows[0] - 2) != 1)  # runs of consecutive rows
        for a, b in zip(starts, [*starts[1:], len(rows)]):
            size = int(b - a) * self.row_bytes
            raw = os.pread(self._fd, size, self.offset + int(rows[a]) * self.row_bytes)
            if len(raw) != size:
                raise MultidevError(f"{self.path} is shorter than its header says: write it again with numpy.save")
            flat[order[a:b]] = np.frombuffer(raw, np.uint8).reshape(int(b - a), -1)
        return out


def _open(path: Path, mapped: bool = False) -> RowFile | np.ndarray:
    """The array of a ``.npy`` file: whole, or (``mapped``) its rows read on demand where the system can read at
    an offset, else memory-mapped; one line when the file is not one."""
    try:
        if mapped and hasattr(os, "pread"):
            return RowFile(path)
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
    y = labels(_open(files["y_train"]), len(x), "y_train")
    if files["x_test"].is_file():
        xt = _samples(files["x_test"], layout, "x_test")
        yt = labels(_open(files["y_test"]), len(xt), "y_test")
        if xt.shape[1:] != x.shape[1:]:
            raise MultidevError(f"x_test's samples are {xt.shape[1:]}, x_train's {x.shape[1:]}: give them one shape")
        return Dataset(root.resolve().name, x, y, xt, yt, class_count(y, yt), _classes(root))
    train, test = stratified(y, test_fraction, seed)
    return Dataset(root.resolve().name, Taken(x, train), y[train], Taken(x, test), y[test],
                   class_count(y[train], y[test]), _classes(root))


def save_folder(data: Dataset, path: str | Path) -> Path:
    """``data`` written as a folder of ``.npy`` files (float32, the core's layout) that :func:`folder` reads back
    as the same numbers: how a data set made in Python reaches the processes of a job. Written in chunks, so a
    set read from files is never whole in memory."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    for name, x, y in (("train", data.x_train, data.y_train), ("test", data.x_test, data.y_test)):
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                  "shape": tuple(x.shape)}
        with open(root / f"x_{name}.npy", "wb") as f:
            np.lib.format.write_array_header_2_0(f, header)
            for _, part in chunks(x):
                f.write(np.ascontiguousarray(part, dtype=np.float32).tobytes())
        np.save(root / f"y_{name}.npy", np.asarray(y, dtype=np.int64))
    if data.classes:
        (root / CLASSES).write_text(json.dumps(list(data.classes)))
    return root


def _classes(root: Path) -> Optional[tuple[str, ...]]:
    """The classes' names a saved data set came with (``classes.json``), if any."""
    try:
        names = json.loads((root / CLASSES).read_text())
    except (OSError, ValueError):
        return None
    return tuple(str(n) for n in names) if isinstance(names, list) else None
