"""What the core does to samples between reading and placing them: augmentation, then normalisation.

Training rows of epoch e are ``normalize(augment(x, seed, e, index))``, test
rows ``normalize(x)``, computed per minibatch on the host by the core, so
every engine receives the same numbers. Without either the sets pass
through untouched (no copy, no cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from multidev.data.rows import Mapped, Samples, chunks
from multidev.errors import MultidevError
from multidev.rules.augment import augment


def parse_normalize(value: object) -> object:
    """None (off), "auto" (the training set's own statistics) or ((means), (stds)), one per channel.

    The command line gives ``auto`` or ``MEANS/STDS`` such as ``0.49,0.48,0.45/0.25,0.24,0.26``.
    """
    if value is None or value is False or value in ("", "none"):
        return None
    if value is True or value == "auto":
        return "auto"
    if isinstance(value, str):
        try:
            mean, std = ([float(v) for v in part.split(",")] for part in value.split("/"))
        except ValueError:
            raise MultidevError(f"--normalize takes auto or MEANS/STDS, e.g. 0.5/0.25 or 0.49,0.48,0.45/0.25,0.24,"
                                f"0.26; got {value!r}") from None
        value = (mean, std)
    try:
        mean, std = (tuple(float(v) for v in part) for part in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise MultidevError(f"normalize takes True, 'auto' or (means, stds); got {value!r}") from None
    if len(mean) != len(std) or not all(s > 0 for s in std):
        raise MultidevError(f"normalize needs one mean and one positive standard deviation per channel; got "
                            f"{list(mean)} and {list(std)}")
    return (mean, std)


def normalize_text(value: object) -> str:
    """The command line's form of a checked ``normalize`` value."""
    if value == "auto":
        return "auto"
    mean, std = value  # type: ignore[misc]
    return ",".join(map(repr, mean)) + "/" + ",".join(map(repr, std))


def channel_statistics(x: Samples) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and (population) standard deviation of a whole set, in float64, read in chunks."""
    axes = (0, 2, 3) if len(x.shape) == 4 else (0,)
    total = square = None
    for _, part in chunks(x):
        part = part.astype(np.float64)
        sums, squares = part.sum(axis=axes), np.square(part).sum(axis=axes)
        total, square = (sums, squares) if total is None else (total + sums, square + squares)
    count = len(x) * (int(np.prod(x.shape[2:])) if len(x.shape) == 4 else 1)
    mean = total / count
    return mean, np.sqrt(np.maximum(square / count - mean ** 2, 0.0))


@dataclass(frozen=True)
class Transforms:
    """The run's augmentation ops and normalisation statistics (None: none)."""

    augment: tuple[str, ...] = ()
    mean: Optional[np.ndarray] = None  # float32, one per channel (feature, for vectors)
    std: Optional[np.ndarray] = None

    @classmethod
    def of(cls, augment_ops: Sequence[str], normalize: object, x_train: Samples) -> "Transforms":
        """The run's transforms; ``normalize="auto"`` reads the training set once for its statistics."""
        if augment_ops and len(x_train.shape) != 4:
            raise MultidevError(f"--augment {','.join(augment_ops)} works on images (N, C, H, W); these samples "
                                f"are {tuple(x_train.shape[1:])}: leave --augment out")
        if normalize is None:
            return cls(tuple(augment_ops))
        mean, std = channel_statistics(x_train) if normalize == "auto" else map(np.asarray, normalize)
        channels = x_train.shape[1]
        if len(mean) != channels:
            raise MultidevError(f"--normalize gives {len(mean)} means for samples of {channels} channels: "
                                f"give one mean and one standard deviation per channel")
        if np.any(np.asarray(std) <= 0):
            raise MultidevError("a channel of the training set is constant (standard deviation 0): "
                                "give --normalize MEANS/STDS")
        return cls(tuple(augment_ops), np.asarray(mean, np.float32), np.asarray(std, np.float32))

    def _normalized(self, x: np.ndarray) -> np.ndarray:
        if self.mean is None:
            return x
        shape = (1, -1, 1, 1) if x.ndim == 4 else (1, -1)
        return (x - self.mean.reshape(shape)) / self.std.reshape(shape)  # type: ignore[union-attr]

    def train(self, x: Samples, seed: int, epoch: int) -> Samples:
        """The training set as epoch ``epoch`` of a run seeded ``seed`` reads it."""
        if not self.augment and self.mean is None:
            return x
        return Mapped(x, lambda index, rows: self._normalized(augment(rows, index, self.augment, seed, epoch)))

    def test(self, x: Samples) -> Samples:
        """The test set: normalised, never augmented."""
        return x if self.mean is None else Mapped(x, lambda index, rows: self._normalized(rows))
