"""Data sets and the engine-independent pipeline (contract: Data order, The user's data, Input pipeline).

``datasets`` names the sets (the embedded digits, Fashion-MNIST and CIFAR-10
downloaded and verified, a synthetic set) and finds the user's by path:
``arrays`` (arrays and ``.npz`` files), ``npy`` (a folder of ``.npy`` files),
``images`` (class folders of image files), ``huggingface`` (a saved set).
Samples are arrays or ``rows.Rows`` read a minibatch at a time;
``transforms`` augments and normalises them; ``loader`` gives every epoch's
seeded order and its minibatches, the same on every engine, device count and
process count.
"""

from multidev.data.arrays import arrays, npz
from multidev.data.datasets import DATASETS, Dataset, digits, load_dataset, synthetic
from multidev.data.loader import batches, epoch_order, num_batches

__all__ = ["DATASETS", "Dataset", "arrays", "npz", "digits", "load_dataset", "synthetic", "batches",
           "epoch_order", "num_batches"]
