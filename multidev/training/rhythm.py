"""How often a run saves mid-epoch (``--checkpoint-every``): every N updates, or every so many seconds."""

from __future__ import annotations

import re
import time
from typing import Optional

from multidev.errors import MultidevError
from multidev.rules.numbers import whole_number

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh])$")


def every(value: object) -> Optional[int | str]:
    """A count of updates (an int, or its digits), or a duration such as 90s, 10m, 1h; one line otherwise."""
    if not isinstance(value, str):
        return None if value is None else whole_number(value, "--checkpoint-every")
    text = value.strip()
    if text.isdigit():
        return whole_number(int(text), "--checkpoint-every")
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise MultidevError(f"--checkpoint-every takes a number of updates (e.g. 50) or a duration (e.g. 10m, 90s, "
                            f"1h), got {value!r}")
    return text


class Rhythm:
    """Says after which updates to save: every ``N``th of the run, or once ``seconds`` have passed since the last."""

    def __init__(self, setting: Optional[int | str]) -> None:
        self.steps = setting if isinstance(setting, int) else None
        self.seconds = None
        if isinstance(setting, str):
            number, unit = _DURATION.match(setting).groups()  # type: ignore[union-attr]
            self.seconds = float(number) * _UNITS[unit]
        self._last = time.monotonic()

    def due(self, update: int) -> bool:
        """Whether to save after ``update`` (counted over the whole run, from 1)."""
        if self.steps is not None:
            return update % self.steps == 0
        if self.seconds is not None and time.monotonic() - self._last >= self.seconds:
            self._last = time.monotonic()
            return True
        return False
