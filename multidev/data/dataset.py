"""A data set: training and test arrays in the core's layout, and its class count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray  # float32, N x C x H x W (images) or N x F (feature vectors)
    y_train: np.ndarray  # int64, N
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]
