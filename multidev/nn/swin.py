"""Shifted-window attention's arithmetic (Swin), one rule for every engine and the reference.

A :class:`~multidev.nn.layers.WindowAttention` over a sample (H, W, C) pads
H and W at the bottom and right up to whole windows, rolls the padded grid
up and left by ``shift`` where a window is smaller than it (torchvision's
rule: a window that covers the grid does not shift), attends within each
window with a learned bias per head and relative offset, masks pairs of
positions that the roll brought together from different regions, and
undoes the roll and the padding. The numbers here are torchvision's
``shifted_window_attention`` (Swin v1); engines take them from these
functions so that none re-derives them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: the score given to pairs of positions from different regions of the rolled grid (torchvision's)
MASKED = -100.0


class Plan(NamedTuple):
    """One input size's padding and shift: the grid (rows, cols) after padding, rows and columns added at the
    bottom and right, and the roll along each axis (0 where a window covers the axis)."""

    rows: int
    cols: int
    pad_bottom: int
    pad_right: int
    shift_rows: int
    shift_cols: int

    @property
    def shifted(self) -> bool:
        return bool(self.shift_rows or self.shift_cols)


def plan(height: int, width: int, window: int, shift: int) -> Plan:
    bottom, right = (window - height % window) % window, (window - width % window) % window
    rows, cols = height + bottom, width + right
    return Plan(rows, cols, bottom, right, 0 if window >= rows else shift, 0 if window >= cols else shift)


def table_size(window: int) -> int:
    """Rows of the relative position bias table: one per offset (dy, dx), each in -(window - 1) .. window - 1."""
    return (2 * window - 1) ** 2


def relative_index(window: int) -> np.ndarray:
    """(window^2, window^2): the table row of each pair (query position, key position) in a window."""
    coords = np.stack(np.meshgrid(np.arange(window), np.arange(window), indexing="ij")).reshape(2, -1)
    offsets = coords[:, :, None] - coords[:, None, :] + window - 1  # (2, N, N), each in 0 .. 2 * window - 2
    return offsets[0] * (2 * window - 1) + offsets[1]


def mask(p: Plan, window: int) -> np.ndarray:
    """(windows, window^2, window^2): 0 where a pair lies in one region of the rolled grid, :data:`MASKED` else."""
    region = np.zeros((p.rows, p.cols))
    count = 0
    for rows in ((0, -window), (-window, -p.shift_rows), (-p.shift_rows, None)):
        for cols in ((0, -window), (-window, -p.shift_cols), (-p.shift_cols, None)):
            region[rows[0]:rows[1], cols[0]:cols[1]] = count
            count += 1
    per_window = region.reshape(p.rows // window, window, p.cols // window, window).transpose(0, 2, 1, 3)
    per_window = per_window.reshape(-1, window * window)
    return np.where(per_window[:, None, :] != per_window[:, :, None], MASKED, 0.0)


def windows(x: np.ndarray, window: int) -> np.ndarray:
    """(n, rows, cols, C) to (n, windows, window^2, C), windows in row-major order (NumPy: the reference)."""
    n, rows, cols, c = x.shape
    x = x.reshape(n, rows // window, window, cols // window, window, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, -1, window * window, c)


def unwindows(x: np.ndarray, window: int, rows: int, cols: int) -> np.ndarray:
    """:func:`windows` reversed."""
    n, _, _, c = x.shape
    x = x.reshape(n, rows // window, cols // window, window, window, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, rows, cols, c)
