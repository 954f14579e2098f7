"""Reader for the idx format of (Fashion-)MNIST, gzip or plain."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from multidev.errors import MultidevError

_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in an idx file; a corrupt file is a one-line error naming it."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as exc:
        raise MultidevError(f"cannot read {path}: {exc}; delete it so it is fetched again") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _TYPES:
        raise MultidevError(f"{path} is not an idx file (bad magic number); delete it so it is fetched again")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise MultidevError(f"{path} is truncated; delete it so it is fetched again")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_TYPES[raw[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise MultidevError(f"{path} holds {len(raw) - header} data bytes, its header promises {expected}; "
                            f"delete it so it is fetched again")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` as idx (gzip when the name ends in .gz); used by tests and tools."""
    array = np.ascontiguousarray(array)
    code = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09}.get(array.dtype)
    if code is None:
        raise ValueError(f"write_idx supports uint8 and int8, got {array.dtype}")
    payload = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(payload)
