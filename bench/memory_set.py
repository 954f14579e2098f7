"""The image set bench_memory reads: a folder of uint8 ``.npy`` files, written once in chunks, removed after.

x_train of shape (N, 3, 64, 64), 10 classes, a test set of 2048 rows, and
``small/x_train.npy``: the first rows as a file of their own, for the naive
``np.load`` of a whole file. Written with plain writes and synced, so the
writer holds one chunk and the pages are clean in the page cache, as a set
written long ago.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np

GiB = 2 ** 30
SAMPLE = (3, 64, 64)
ROW = int(np.prod(SAMPLE))  # bytes of one uint8 sample
CLASSES, TEST_ROWS = 10, 2048
FILES = ("x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy", "small/x_train.npy", "complete")


def _write_x(path: Path, rows: int, seed: int, bar) -> None:
    """``rows`` random uint8 samples: the file made (header, size) by ``open_memmap``, then filled chunk by chunk
    with plain writes, so the writer holds one chunk, not the mapped file's pages."""
    made = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(rows, *SAMPLE))
    offset = made.offset
    del made
    rng = np.random.default_rng(seed)
    chunk = 1024
    with open(path, "r+b") as f:
        f.seek(offset)
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            f.write(rng.bytes(n * ROW))
            if bar is not None:
                bar.update(n * ROW)
        f.flush()
        os.fsync(f.fileno())  # on disk, clean in the page cache: as a set written long ago


def _copy_rows(source: Path, target: Path, rows: int) -> None:
    """The first ``rows`` of ``source`` as their own ``.npy`` file (for the naive ``np.load``), in chunks."""
    x = np.load(source, mmap_mode="r")
    made = np.lib.format.open_memmap(target, mode="w+", dtype=x.dtype, shape=(rows, *x.shape[1:]))
    offset = made.offset
    del made
    with open(target, "r+b") as f:
        f.seek(offset)
        f.writelines(np.ascontiguousarray(x[start:min(start + 1024, rows)]).tobytes() for start in range(0, rows, 1024))
        f.flush()
        os.fsync(f.fileno())
    del x


def write_set(folder: Path, rows: int, small_rows: int) -> bool:
    """The set in ``folder``, written unless a complete one of ``rows`` rows is there; True when written."""
    done = folder / "complete"
    if done.is_file() and done.read_text().strip() == f"{rows} {small_rows}":
        return False
    from tqdm.auto import tqdm

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "small").mkdir(exist_ok=True)
    done.unlink(missing_ok=True)
    need = (rows + small_rows + TEST_ROWS) * ROW
    free = shutil.disk_usage(folder).free
    if free < need + GiB:
        sys.exit(f"{folder}: {free / GiB:.1f} GiB free, the set needs {need / GiB:.1f} GiB (and 1 GiB to spare)")
    with tqdm(total=need, unit="B", unit_scale=True, desc=f"writing {folder}") as bar:
        _write_x(folder / "x_train.npy", rows, 1, bar)
        _write_x(folder / "x_test.npy", TEST_ROWS, 2, bar)
        _copy_rows(folder / "x_train.npy", folder / "small" / "x_train.npy", small_rows)
        bar.update(small_rows * ROW)
    rng = np.random.default_rng(3)
    np.save(folder / "y_train.npy", rng.integers(0, CLASSES, rows, dtype=np.int64))
    np.save(folder / "y_test.npy", rng.integers(0, CLASSES, TEST_ROWS, dtype=np.int64))
    done.write_text(f"{rows} {small_rows}\n")
    return True


def remove_set(folder: Path) -> None:
    """The files this bench writes, and the folders if that leaves them empty; nothing else."""
    for name in FILES:
        (folder / name).unlink(missing_ok=True)
    for d in (folder / "small", folder):
        try:
            d.rmdir()
        except OSError:
            pass
