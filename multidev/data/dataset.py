"""A data set: training and test samples in the core's layout, and its class count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from multidev.data.rows import Samples


@dataclass(frozen=True)
class Dataset:
    name: str
    #: float32, N x C x H x W (images) or N x F (feature vectors): an array, or a Rows read a minibatch at a time
    x_train: Samples
    y_train: np.ndarray  # int64, N
    x_test: Samples
    y_test: np.ndarray
    num_classes: int
    #: the classes' names in label order, where the data names them (image folders, Fashion-MNIST, CIFAR-10)
    classes: Optional[tuple[str, ...]] = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]
