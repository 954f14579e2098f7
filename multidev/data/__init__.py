"""Data sets and the engine-independent pipeline (contract: Data order, Input pipeline).

``datasets`` holds the sets as NumPy arrays in the core's NCHW layout
(the embedded digits, Fashion-MNIST through ``fashion_mnist`` and ``idx``,
a synthetic set), ``arrays`` the user's own arrays and ``.npz`` files; ``loader`` gives every epoch's seeded order and its
minibatches, the same on every engine, device count and process count.
"""

from multidev.data.arrays import arrays, npz
from multidev.data.datasets import DATASETS, Dataset, digits, load_dataset, synthetic
from multidev.data.loader import batches, epoch_order, num_batches

__all__ = ["DATASETS", "Dataset", "arrays", "npz", "digits", "load_dataset", "synthetic", "batches", "epoch_order", "num_batches"]
