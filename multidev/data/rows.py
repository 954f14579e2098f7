"""Samples read on demand: a data set larger than memory is read one minibatch at a time.

The core reads a minibatch as ``x[index]`` with an array of sample numbers;
NumPy arrays do that in memory, a :class:`Rows` does it by reading (a
``.npy`` file's rows at their offsets, image files decoded with Pillow) only
the rows asked for. Each process asks only for its own rows, so memory stays flat as
the set grows.
"""

from __future__ import annotations

from typing import Callable, Union

import numpy as np

from multidev.errors import MultidevError


def floats(x: np.ndarray) -> np.ndarray:
    """Samples as the core's float32: uint8 pixels ``x.astype(float32) / 255`` (in [0, 1]), other numbers cast.

    The one formula of every reader (contract: The user's data), so the same pixels from an array, a file or an
    image give the same numbers.
    """
    return x.astype(np.float32) / np.float32(255) if x.dtype == np.uint8 else x.astype(np.float32)


def in_core_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """Stored samples as the core's contiguous float32, images turned from NHWC to NCHW where ``layout`` says."""
    x = floats(x)
    if layout == "NHWC" and x.ndim == 4:
        x = np.transpose(x, (0, 3, 1, 2))
    return np.ascontiguousarray(x)


class Rows:
    """A sequence of samples of one shape, float32 in the core's layout, read ``index`` by ``index``."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(int(n) for n in shape)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    def __getitem__(self, index: object) -> np.ndarray:
        if isinstance(index, slice):
            index = np.arange(len(self))[index]
        index = np.asarray(index)
        if index.dtype == bool or not np.issubdtype(index.dtype, np.integer):
            raise TypeError(f"{type(self).__name__} rows are read by whole-number indices, got {index.dtype}")
        if index.ndim == 0:
            return self.read(index.reshape(1))[0]
        return self.read(index)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self.read(np.arange(len(self)))
        return whole if dtype is None else whole.astype(dtype)

    def read(self, index: np.ndarray) -> np.ndarray:
        """Samples ``index`` (1-D whole numbers), (len(index), *shape[1:]) float32."""
        raise NotImplementedError


Samples = Union[np.ndarray, Rows]


class Pixels(Rows):
    """Stored arrays (in memory, or a file's rows) put in the core's layout per read: uint8 scaled to [0, 1], NHWC
    turned to NCHW, any number to float32."""

    def __init__(self, stored: np.ndarray, layout: str = "NCHW") -> None:
        self.stored, self.layout = stored, layout
        sample = stored.shape[1:]
        if layout == "NHWC" and len(sample) == 3:
            sample = (sample[2], sample[0], sample[1])
        super().__init__((len(stored), *sample))

    def read(self, index: np.ndarray) -> np.ndarray:
        return in_core_layout(np.asarray(self.stored[index]), self.layout)


class Mapped(Rows):
    """``transform(index, base[index])`` of another set's rows: augmentation and normalisation, per read."""

    def __init__(self, base: Samples, transform: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
        super().__init__(base.shape)
        self.base, self.transform = base, transform

    def read(self, index: np.ndarray) -> np.ndarray:
        return self.transform(index, np.asarray(self.base[index]))


def chunks(x: Samples, size: int = 4096):
    """``x`` in consecutive chunks of rows: a whole-set pass (statistics, checks) in flat memory."""
    for start in range(0, len(x), size):
        yield start, np.asarray(x[np.arange(start, min(start + size, len(x)))])


def check_finite(x: Samples, what: str) -> None:
    """One line naming the first row that holds NaN or an infinite value."""
    for start, part in chunks(x):
        bad = ~np.isfinite(part)
        if bad.any():
            raise MultidevError(f"{what} holds NaN or infinite values (first at row "
                                f"{start + int(np.argwhere(bad)[0][0])}): clean or drop those rows")


class Taken(Rows):
    """Some rows of another set, in the order given: a held-out split that reads nothing until asked."""

    def __init__(self, base: Samples, rows: np.ndarray) -> None:
        super().__init__((len(rows), *base.shape[1:]))
        self.base, self.rows = base, np.asarray(rows)

    def read(self, index: np.ndarray) -> np.ndarray:
        return np.asarray(self.base[self.rows[index]])
