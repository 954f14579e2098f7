"""Augmentation drawn by the core, so every engine, device count and process count sees the same pixels.

A sample's crop offset and flip are a function of (seed, epoch, sample
index) alone (``multidev.rules.counter``), never of the order rows are read
in, the device a row lands on or the process that reads it; a resumed run
draws what the uninterrupted one drew. The ops are torchvision's habits:
``crop`` pads every side with ``padding(min(H, W))`` zeros and cuts a window of the
original size at a random offset, ``flip`` mirrors left-right with
probability 1/2. They run on the host in the data's float32, before any
normalisation, and copy values exactly, so float64 runs see the same numbers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from multidev.errors import MultidevError
from multidev.rules import counter

AUGMENTS = ("crop", "flip")
#: the key part that keeps augmentation's numbers apart from Dropout's
_TAG = 0x6175676D  # "augm"


def parse_augment(value: object) -> tuple[str, ...]:
    """``"crop,flip"`` or a sequence of op names, checked, in canonical order (the order they run in)."""
    if value is None or value == "" or value == ():
        return ()
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else [str(v) for v in value]  # type: ignore[attr-defined]
    unknown = [n for n in names if n not in AUGMENTS]
    if unknown:
        raise MultidevError(f"unknown augmentation {unknown[0]!r}: choose from {', '.join(AUGMENTS)} "
                            f"(e.g. --augment crop,flip)")
    return tuple(a for a in AUGMENTS if a in names)


def padding(side: int) -> int:
    """Zeros added to each side before a random crop (``side``: the image's shorter one): 4 for CIFAR's 32,
    3 for 28, 1 for 8."""
    return max(1, side // 8)


def draws(seed: int, epoch: int, index: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each sample's crop offsets (dy, dx in 0..2*pad) and whether it is flipped."""
    u = counter.uniforms((seed, epoch, _TAG), np.asarray(index), 3)
    span = 2 * pad + 1
    offsets = np.minimum((u[:, :2] * span).astype(np.int64), span - 1)
    return offsets[:, 0], offsets[:, 1], u[:, 2] < 0.5


def augment(x: np.ndarray, index: np.ndarray, ops: Sequence[str], seed: int, epoch: int) -> np.ndarray:
    """Samples ``x`` (rows ``index`` of the training set, N x C x H x W) as epoch ``epoch`` sees them."""
    if not ops:
        return x
    if x.ndim != 4:
        raise MultidevError(f"--augment {','.join(ops)} works on images (N, C, H, W); these samples are "
                            f"{x.shape[1:]}: leave --augment out")
    height, width = x.shape[2:]
    pad = padding(min(height, width))
    dy, dx, flip = draws(seed, epoch, index, pad)
    out = x.copy()
    if "crop" in ops:
        padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        for r in range(len(x)):
            out[r] = padded[r, :, dy[r]:dy[r] + height, dx[r]:dx[r] + width]
    if "flip" in ops:
        out[flip] = out[flip][..., ::-1]
    return out
