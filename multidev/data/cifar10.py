"""CIFAR-10: the official binary archive, checked by its published MD5 and read straight from the tar.

The binary version is used rather than the Python one because that one is
pickled, and unpickling a downloaded file runs whatever code it holds. The
batches are decoded from the archive's members in memory (nothing is
unpacked to disk) with ``np.frombuffer``, and the images stay uint8: a
:class:`~multidev.data.rows.Pixels` scales each minibatch to [0, 1] as it is
read, so the 600 MB float32 copy of the training set never exists.
"""

from __future__ import annotations

import tarfile
import zlib
from pathlib import Path

import numpy as np

from multidev.data.dataset import Dataset
from multidev.data.download import cache_dir, fetch_url, verify
from multidev.data.rows import Pixels
from multidev.errors import MultidevError, first_line

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
FILE = "cifar-10-binary.tar.gz"
MD5 = "c32a1d4ab5d03f1284b67883e8d87530"  # published beside the archive
FOLDER = "cifar-10-batches-bin"
TRAIN = tuple(f"{FOLDER}/data_batch_{i}.bin" for i in range(1, 6))
TEST = (f"{FOLDER}/test_batch.bin",)
SHAPE = (3, 32, 32)  # channel-major: the 1024 red bytes, then green, then blue, each row by row
RECORD = 1 + 3 * 32 * 32  # one label byte, then the pixels
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def default_dir() -> Path:
    """Where the archive is kept when no folder is given: the user's cache, shared by every run."""
    return cache_dir("cifar-10")


def fetch(data_dir: str | Path | None = None, *, download: bool = True, url: str = URL,
          md5: str = MD5) -> Path:
    """Path of the verified archive, downloaded first if it is not in ``data_dir``.

    An archive already in place is used without touching the network, so an
    offline machine works once the file has been copied there by hand.
    """
    folder = Path(data_dir) if data_dir is not None else default_dir()
    path = folder / FILE
    if not path.exists():
        if not download:
            raise MultidevError(f"{path} is missing: put {FILE} (from {URL}) into {folder}")
        fetch_url(url, path)
    verify(path, md5)
    return path


def _malformed(archive: Path, member: str, problem: str) -> MultidevError:
    return MultidevError(f"{archive}: {member} {problem}; delete {archive} so it is fetched again, "
                         f"or put the official {FILE} there")


def _members(archive: Path, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    """The six batch members, checked for presence, type and size before any pixel is decoded."""
    found = {m.name: m for m in tar.getmembers()}
    members = {}
    for name in TRAIN + TEST:
        member = found.get(name)
        if member is None or not member.isfile():
            raise _malformed(archive, name, "is missing from the archive")
        if member.size == 0 or member.size % RECORD:
            raise _malformed(archive, name, f"holds {member.size} bytes, not one or more whole "
                                            f"{RECORD}-byte records")
        members[name] = member
    return members


def _decode(archive: Path, tar: tarfile.TarFile, members: list[tarfile.TarInfo]) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, 32, 32) uint8 and int64 labels of ``members``, in that order, written into arrays allocated
    once so the peak memory is the result plus one batch. Members are read in the archive's order, because
    a compressed tar read backwards is decompressed from its start again."""
    counts = [m.size // RECORD for m in members]
    starts = np.cumsum([0, *counts])
    x, y = np.empty((starts[-1], *SHAPE), np.uint8), np.empty(starts[-1], np.int64)
    for i in sorted(range(len(members)), key=lambda i: members[i].offset):
        member = members[i]
        f = tar.extractfile(member)
        raw = f.read() if f is not None else b""
        if len(raw) != member.size:
            raise _malformed(archive, member.name, f"ends after {len(raw)} of {member.size} bytes")
        records = np.frombuffer(raw, np.uint8).reshape(-1, RECORD)
        if records[:, 0].max() >= len(CLASSES):
            raise _malformed(archive, member.name, f"holds label {records[:, 0].max()}, not one of 0-9")
        x[starts[i]:starts[i + 1]] = records[:, 1:].reshape(-1, *SHAPE)
        y[starts[i]:starts[i + 1]] = records[:, 0]
    return x, y


def load(data_dir: str | Path | None = None, *, download: bool = True, url: str = URL, md5: str = MD5
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): uint8 images (50000 | 10000, 3, 32, 32) and int64 labels.

    All six batches are decoded in one pass over the archive; the train and test arrays are views of it.
    """
    archive = fetch(data_dir, download=download, url=url, md5=md5)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _members(archive, tar)
            x, y = _decode(archive, tar, [members[n] for n in TRAIN + TEST])
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise MultidevError(f"cannot read {archive} ({first_line(exc)}): delete it so it is fetched again, "
                            f"or put the official {FILE} there") from None
    n_train = sum(members[n].size for n in TRAIN) // RECORD
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def dataset(data_dir: str | Path | None = None, download: bool = True, *, url: str = URL,
            md5: str = MD5) -> Dataset:
    """CIFAR-10 in the core's layout: 3x32x32 images scaled to [0, 1] float32 one minibatch at a time."""
    x_train, y_train, x_test, y_test = load(data_dir, download=download, url=url, md5=md5)
    return Dataset("cifar-10", Pixels(x_train), y_train, Pixels(x_test), y_test, len(CLASSES), CLASSES)
