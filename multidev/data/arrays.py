"""The user's own data as arrays, in memory or in a ``.npz`` file, checked once and put in the core's layout.

Images come NCHW (the core's layout) or NHWC (``layout="NHWC"``), uint8
(scaled to [0, 1]) or float; feature vectors come (N, F). Labels are whole
numbers 0..C-1; the class count and input shape are read off the data.
Without test arrays a seeded fraction of the training rows is held out, so
every engine and run sees the same test set. Bad data is one line before
anything trains.
"""

from __future__ import annotations

import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from multidev.data.dataset import Dataset
from multidev.data.holdout import stratified
from multidev.data.rows import floats
from multidev.errors import MultidevError

LAYOUTS = ("NCHW", "NHWC")


def sample_shape(shape: tuple[int, ...], layout: str, what: str) -> tuple[int, ...]:
    """One sample's shape in the core's layout, or one line when ``shape`` is neither images nor features."""
    if layout not in LAYOUTS:
        raise MultidevError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if len(shape) == 2:
        return tuple(shape[1:])  # feature vectors (N, F)
    if len(shape) != 4:
        raise MultidevError(f"{what} has shape {shape}: give images (N, C, H, W) or (N, H, W, C) with "
                            f"layout='NHWC', or feature vectors (N, F); add a channel axis to grayscale (N, H, W)")
    return (shape[3], shape[1], shape[2]) if layout == "NHWC" else tuple(shape[1:])


def check_kind(dtype: np.dtype, what: str) -> None:
    """Numbers only: uint8 images, floats or integers."""
    if not np.issubdtype(dtype, np.number) or np.issubdtype(dtype, np.complexfloating):
        raise MultidevError(f"{what} holds {dtype} values: give uint8 images or float (or int) numbers")


def _images(x: np.ndarray, layout: str, what: str) -> np.ndarray:
    sample_shape(x.shape, layout, what)
    if layout == "NCHW" and x.ndim == 4 and x.shape[1] > 4 and x.shape[3] in (1, 3, 4):
        warnings.warn(f"{what} has shape {x.shape}: its last axis looks like colour channels; if it is, give "
                      f"layout='NHWC' (--layout NHWC)", stacklevel=3)
    return np.transpose(x, (0, 3, 1, 2)) if layout == "NHWC" and x.ndim == 4 else x


def _values(x: object, layout: str, what: str) -> np.ndarray:
    x = np.asarray(x)
    check_kind(x.dtype, what)
    x = floats(x)
    if len(x) == 0:
        raise MultidevError(f"{what} is empty: give at least one sample")
    if not np.all(np.isfinite(x)):
        raise MultidevError(f"{what} holds NaN or infinite values (first at row "
                            f"{int(np.argwhere(~np.isfinite(x))[0][0])}): clean or drop those rows")
    return np.ascontiguousarray(_images(x, layout, what))


def labels(y: object, rows: int, what: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != rows:
        raise MultidevError(f"{what} has shape {y.shape} for {rows} samples: give one whole-number label per sample")
    if not np.issubdtype(y.dtype, np.integer):
        raise MultidevError(f"{what} holds {y.dtype} values: labels must be whole numbers 0..C-1")
    if len(y) and y.min() < 0:
        raise MultidevError(f"{what} holds the label {int(y.min())}: labels must be whole numbers 0..C-1")
    return y.astype(np.int64)


def _held_out(x: np.ndarray, y: np.ndarray, fraction: float, seed: int):
    train, test = stratified(y, fraction, seed)
    return x[train], y[train], x[test], y[test]


def class_count(y: np.ndarray, y_test: np.ndarray) -> int:
    """C, from the labels; one line when the training labels skip a class or the test labels hold one more."""
    if len(y_test) and y_test.max() > y.max():
        raise MultidevError(f"the test labels hold class {int(y_test.max())}, the training labels only 0.."
                            f"{int(y.max())}: a model cannot learn a class it never sees; give training samples of it")
    classes = int(max(y.max(), y_test.max())) + 1
    missing = sorted(set(range(classes)) - set(np.unique(y).tolist()))
    if missing:
        raise MultidevError(f"the training labels never hold class {missing[0]} of 0..{classes - 1}: labels must "
                            f"number the classes 0..C-1 without gaps")
    return classes


def arrays(x_train: object, y_train: object, x_test: object = None, y_test: object = None, *, layout: str = "NCHW",
           name: str = "arrays", test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A data set from arrays; without ``x_test`` a seeded ``test_fraction`` of the rows is the test set."""
    x = _values(x_train, layout, "x_train")
    y = labels(y_train, len(x), "y_train")
    if (x_test is None) != (y_test is None):
        raise MultidevError("give x_test and y_test together, or neither (a seeded fraction is then held out)")
    if x_test is None:
        x, y, xt, yt = _held_out(x, y, test_fraction, seed)
    else:
        xt = _values(x_test, layout, "x_test")
        yt = labels(y_test, len(xt), "y_test")
        if xt.shape[1:] != x.shape[1:]:
            raise MultidevError(f"x_test's samples are {xt.shape[1:]}, x_train's {x.shape[1:]}: give them one shape")
    return Dataset(name, x, y, xt, yt, class_count(y, yt))


def _first_bytes(path: str | Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(2)


def npz(path: str | Path, layout: str = "NCHW") -> Dataset:
    """A data set from a ``.npz`` file holding ``x_train``, ``y_train`` and optionally ``x_test``, ``y_test``."""
    if Path(path).is_file() and _first_bytes(path) != b"PK":  # a zip's first bytes, damaged or not
        raise MultidevError(f"{path} is not a .npz file (a zip of .npy arrays): write it with numpy.savez")
    try:
        with np.load(path, allow_pickle=False) as f:
            found = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise MultidevError(f"data file {path} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise MultidevError(f"{path} is not a readable .npz file ({exc}): write it again with numpy.savez") from None
    lacking = [k for k in ("x_train", "y_train") if k not in found]
    if lacking:
        raise MultidevError(f"{path} holds {', '.join(sorted(found)) or 'nothing'}; it needs x_train and y_train "
                            f"(and optionally x_test, y_test)")
    return arrays(found["x_train"], found["y_train"], found.get("x_test"), found.get("y_test"), layout=layout,
                  name=Path(path).stem)

