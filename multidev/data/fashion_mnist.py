"""Fashion-MNIST: fetch from the official location, verify MD5, read idx files.

Files already in the data directory are used without touching the network.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from multidev.data.idx import read_idx
from multidev.errors import MultidevError
from multidev.outputs.files import atomic_write

URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FILES = {  # name -> published MD5
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}


def default_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "multidev" / "fashion-mnist"


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _download(name: str, target: Path, url: str) -> None:
    """Fetch into a temporary file beside ``target`` and rename: never a half file in place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_write(target, what="data file") as out, urllib.request.urlopen(url + name, timeout=60) as response:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except (urllib.error.URLError, OSError) as exc:
        raise MultidevError(f"cannot download {name} from {url} ({getattr(exc, 'reason', exc)}): "
                            f"put {', '.join(FILES)} into {target.parent} by hand") from None


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
            _download(name, path, url)
        got = md5(path)
        if got != checksum:
            raise MultidevError(f"{path} fails its MD5 check (got {got}, published {checksum}): "
                                f"delete it and run again, or put the official file there")
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
