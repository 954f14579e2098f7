"""The data sets every engine trains on, as numpy arrays in the canonical layout."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from multidev.data import cifar10, fashion_mnist, huggingface, images, npy
from multidev.data.arrays import npz
from multidev.data.dataset import Dataset
from multidev.data.handwritten import images_and_labels as digit_images
from multidev.data.handwritten import split as digit_split
from multidev.data.rows import floats
from multidev.errors import MultidevError

DATASETS = ("digits", "fashion-mnist", "cifar-10", "synthetic")

__all__ = ["DATASETS", "Dataset", "digits", "fashion", "load_dataset", "synthetic"]


def digits(test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1,797 real images, no download).

    The train/test split is fixed (stratified, seed 0) so every run and every
    engine sees the same test set.
    """
    images, labels = digit_images()
    x = (images / 16.0).astype(np.float32)[:, None]
    y = labels.astype(np.int64)
    train, test = digit_split(y, test_fraction)
    x_tr, x_te, y_tr, y_te = x[train], x[test], y[train], y[test]
    return Dataset("digits", x_tr, y_tr, x_te, y_te, 10)


def synthetic(n_train: int = 512, n_test: int = 128, shape: tuple[int, int, int] = (1, 16, 16),
              num_classes: int = 10, seed: int = 0, noise: float = 0.5) -> Dataset:
    """Learnable random data for fast tests: a fixed template per class plus noise."""
    rng = np.random.default_rng(seed)
    templates = rng.normal(0, 1, (num_classes, *shape))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, num_classes, n)
        x = templates[y] + noise * rng.normal(0, 1, (n, *shape))
        return x.astype(np.float32), y.astype(np.int64)

    x_tr, y_tr = draw(n_train)
    x_te, y_te = draw(n_test)
    return Dataset("synthetic", x_tr, y_tr, x_te, y_te, num_classes)


def fashion(data_dir: Optional[str | Path] = None, download: bool = True) -> Dataset:
    """Fashion-MNIST, 28x28, scaled to [0, 1]."""
    x_tr, y_tr, x_te, y_te = fashion_mnist.load(data_dir, download=download)
    return Dataset("fashion-mnist", floats(x_tr)[:, None], y_tr.astype(np.int64), floats(x_te)[:, None],
                   y_te.astype(np.int64), 10, fashion_mnist.CLASSES)


def load_dataset(name: str, data_dir: Optional[str | Path] = None, layout: str = "NCHW", *,
                 image_size: Optional[tuple[int, int]] = None, color: str = "auto", image_column: str = "image",
                 label_column: str = "label", progress: bool = False) -> Dataset:
    """A data set by name, or the user's: a ``.npz`` file, a folder of ``.npy`` files (images in ``layout``),
    a saved Hugging Face set (its ``image_column`` and ``label_column``), or a folder of class folders of
    images (resized to ``image_size``, read as ``color``)."""
    kind = _kind(name)
    if layout != "NCHW" and kind in ("named", "images"):
        raise MultidevError(f"--layout is for your arrays (a .npz file, a folder of .npy files, a saved Hugging Face "
                            f"set); {name} is read in its own layout: leave --layout out")
    if kind != "images" and (image_size is not None or color != "auto"):  # a flag that would change nothing
        flag = "--image-size" if image_size is not None else "--color"
        raise MultidevError(f"{flag} is for a folder of images; {name} holds arrays: leave {flag} out, and give "
                            f"the arrays the size and channels the model should see")
    if kind == "named":
        return _NAMED[name](data_dir)
    if kind == "npz":
        return npz(name, layout)
    if kind == "npy":
        return npy.folder(name, layout)
    if kind == "huggingface":
        return huggingface.load(name, image_column=image_column, label_column=label_column, layout=layout)
    return images.folder(name, image_size, color, progress=progress)


def _kind(name: str) -> str:
    """named, npz, npy, huggingface or images: what ``name`` is; one line when it is none of them."""
    path = Path(name)
    if name in _NAMED:
        return "named"
    if name.endswith(".npz"):
        return "npz"
    if not path.is_dir():
        raise MultidevError(f"unknown data set {name!r}: choose one of {', '.join(DATASETS)}, or give a .npz file "
                            f"or a folder")
    if npy.is_npy_folder(path):
        return "npy"
    return "huggingface" if huggingface.is_saved_dataset(path) else "images"


_NAMED = {"digits": lambda _: digits(), "synthetic": lambda _: synthetic(), "fashion-mnist": fashion,
          "cifar-10": cifar10.dataset}
