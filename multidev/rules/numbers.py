"""The one check of a whole number a user gives (epochs, batch size, micro-batches, warm-up steps)."""

from __future__ import annotations

import numpy as np

from multidev.errors import MultidevError


def whole_number(value: object, what: str, minimum: int = 1, unit: str = "") -> int:
    """``value`` as an int, or one line saying it must be a whole number (of ``unit``) of at least ``minimum``.

    A bool is refused although Python counts it as an int: ``epochs=True`` is a mistake, not 1.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        bound = "0 or more" if minimum == 0 else f"at least {minimum}"
        raise MultidevError(f"{what} must be a whole number{unit} of {bound}, got {value!r}")
    return int(value)
