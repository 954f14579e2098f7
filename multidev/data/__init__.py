"""Data sets and the engine-independent pipeline."""

from multidev.data.datasets import DATASETS, Dataset, digits, load_dataset, synthetic
from multidev.data.loader import batches, epoch_order, num_batches

__all__ = ["DATASETS", "Dataset", "digits", "load_dataset", "synthetic", "batches", "epoch_order", "num_batches"]
