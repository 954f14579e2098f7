"""Fashion-MNIST: fetch from the official location, verify MD5, read idx files.

Files already in the data directory are used without touching the network.
"""

from __future__ import annotations

import urllib.request  # noqa: F401  (tests patch fm.urllib.request.urlopen to prove no network is used)
from pathlib import Path
from typing import Optional

from multidev.data.download import cache_dir, fetch_url, md5, verify
from multidev.data.idx import read_idx
from multidev.errors import MultidevError

__all__ = ["FILES", "URL", "default_dir", "fetch", "load", "md5"]

URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
#: the labels' names, as the data set's authors publish them
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
FILES = {  # name -> published MD5
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}


def default_dir() -> Path:
    """Where the files are kept when no folder is given: the user's cache, shared by every run."""
    return cache_dir("fashion-mnist")


def fetch(data_dir: Optional[str | Path] = None, *, download: bool = True, url: str = URL) -> dict[str, Path]:
    """Paths of the four verified files, downloading any that are missing."""
    folder = Path(data_dir) if data_dir is not None else default_dir()
    paths = {}
    for name, checksum in FILES.items():
        path = folder / name
        if not path.exists():
            if not download:
                raise MultidevError(f"{path} is missing: put the Fashion-MNIST files "
                                    f"({', '.join(FILES)}) into {folder}")
            fetch_url(url + name, path, by_hand=list(FILES), source=url)
        verify(path, checksum)
        paths[name] = path
    return paths


def load(data_dir: Optional[str | Path] = None, *, download: bool = True, url: str = URL):
    """(x_train, y_train, x_test, y_test) as uint8 images (N, 28, 28) and int labels."""
    p = fetch(data_dir, download=download, url=url)
    arrays = [read_idx(p[n]) for n in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                       "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")]
    for images, labels, split in ((arrays[0], arrays[1], "train"), (arrays[2], arrays[3], "test")):
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise MultidevError(f"Fashion-MNIST {split} images {images.shape} and labels {labels.shape} "
                                f"do not match: delete the files in {p['t10k-labels-idx1-ubyte.gz'].parent}")
    return tuple(arrays)
