"""Window arithmetic of convolutions and pools: padding, dilation, ``ceil_mode``, "same", one rule for every engine.

A window layer states its padding as one number, ``(rows, columns)``, the
four sides ``(top, bottom, left, right)`` or ``"same"`` (the output keeps
``ceil(size / stride)``; an odd total puts the extra row at the bottom and
the extra column on the right, as ONNX's ``SAME_UPPER``, TensorFlow and
torch's ``padding="same"`` do). Engines ask :func:`sides` for the four sides
at an input's size, so none of them re-derives "same" or ``ceil_mode``.

``ceil_mode`` (pools): the output size rounds up, as torch's and ONNX's do,
and a last window that would start in the bottom or right padding is
dropped (torch's rule). The rows such a window needs past the padding are
:func:`ceil_extra`: they hold no value (max ignores them, a mean does not
count them).
"""

from __future__ import annotations

import math
from typing import Union

from multidev.errors import MultidevError

Sides = tuple[int, int, int, int]  # top, bottom, left, right
Padding = Union[int, str, tuple[int, ...]]


def padding_value(value: object, what: str) -> Padding:
    """``value`` as a definition stores it: an int, "same", or a tuple of 2 or 4 whole numbers (lists read back)."""
    if isinstance(value, str):
        if value.lower() in ("same", "valid"):
            return value.lower() if value.lower() == "same" else 0
        raise MultidevError(f"{what} is {value!r}: give a whole number, (rows, columns), (top, bottom, left, right) "
                            f"or 'same'")
    if isinstance(value, (list, tuple)):
        if len(value) not in (2, 4) or not all(_natural(v) for v in value):
            raise MultidevError(f"{what} is {value!r}: give 2 whole numbers (rows, columns) or 4 (top, bottom, "
                                f"left, right), none below 0")
        return tuple(value)
    if not _natural(value):
        raise MultidevError(f"{what} must be a whole number of at least 0, 'same' or a tuple, got {value!r}")
    return value


def _natural(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def sides(padding: Padding, size: tuple[int, int], kernel: int, stride: int, dilation: int = 1) -> Sides:
    """The four sides of ``padding`` for an input of ``size`` (rows, columns)."""
    if padding == "same":
        out = []
        for n in size:
            total = max((math.ceil(n / stride) - 1) * stride + dilation * (kernel - 1) + 1 - n, 0)
            out += [total // 2, total - total // 2]
        return out[0], out[1], out[2], out[3]
    if isinstance(padding, int):
        return (padding,) * 4
    if len(padding) == 2:
        return padding[0], padding[0], padding[1], padding[1]
    return tuple(padding)  # type: ignore[return-value]


def symmetric(padding: Padding) -> bool:
    """Whether the padding is the same on both sides of each axis whatever the input (no "same", no 4 sides)."""
    return isinstance(padding, int) or (isinstance(padding, tuple) and len(padding) == 2)


def out_size(n: int, kernel: int, stride: int, before: int, after: int, dilation: int = 1,
             ceil_mode: bool = False) -> int:
    """Outputs along one axis of ``n`` values; 0 or less: the window does not fit."""
    span = n + before + after - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= n + before:  # the last window would start in the padding after the input
        out -= 1
    return out


def ceil_extra(n: int, kernel: int, stride: int, before: int, after: int, ceil_mode: bool) -> int:
    """Positions past ``after`` that ``ceil_mode``'s last window reaches (0 without it)."""
    if not ceil_mode:
        return 0
    out = out_size(n, kernel, stride, before, after, 1, True)
    return max((out - 1) * stride + kernel - (n + before + after), 0)
