"""Fashion-MNIST: files checked by their MD5, used in place without the network, fetched atomically;
errors name the file and the folder."""

import functools
import hashlib
import http.server
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from multidev import MultidevError
from multidev.data import fashion_mnist as fm
from multidev.data import load_dataset
from multidev.data.idx import read_idx, write_idx

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "fashion-mnist"
LABELS = ["train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/fashion-mnist is not beside the checkout")
def test_real_label_files_verify_and_parse():
    for name, per_class in zip(LABELS, (6000, 1000)):
        assert fm.md5(SHARED / name) == fm.FILES[name]
        labels = read_idx(SHARED / name)
        assert labels.shape == (10 * per_class,) and labels.dtype == np.uint8
        assert np.bincount(labels).tolist() == [per_class] * 10


def _write_fake_set(folder: Path, n_train=30, n_test=10) -> dict:
    """Small idx files in Fashion-MNIST's names, and their checksums."""
    rng = np.random.default_rng(1)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        write_idx(folder / name, array)
    return {name: hashlib.md5((folder / name).read_bytes()).hexdigest() for name in arrays}


def test_files_in_place_are_used_without_network(tmp_path, monkeypatch):
    monkeypatch.setattr(fm, "FILES", _write_fake_set(tmp_path))
    monkeypatch.setattr(fm.urllib.request, "urlopen", lambda *a, **k: pytest.fail("touched the network"))
    data = load_dataset("fashion-mnist", tmp_path)
    assert data.x_train.shape == (30, 1, 28, 28) and data.x_test.shape == (10, 1, 28, 28)
    assert data.x_train.max() <= 1.0 and data.y_train.dtype == np.int64


def test_download_fetches_and_verifies(tmp_path, monkeypatch):
    served = tmp_path / "server"
    monkeypatch.setattr(fm, "FILES", _write_fake_set(served))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        paths = fm.fetch(tmp_path / "cache", url=url)
    finally:
        server.shutdown()
    assert sorted(p.name for p in paths.values()) == sorted(fm.FILES)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]  # no temp files left


def test_no_network_names_files_and_folder(tmp_path):
    message = (rf"cannot download train-images-idx3-ubyte.gz from http://127.0.0.1:9/ \(.*\): "
               rf"put {', '.join(fm.FILES)} into {re.escape(str(tmp_path))} by hand")
    with pytest.raises(MultidevError, match=f"^{message}$"):
        fm.fetch(tmp_path, url="http://127.0.0.1:9/")  # discard port: nothing listens


def test_bad_checksum_names_the_file(tmp_path, monkeypatch):
    checksums = _write_fake_set(tmp_path)
    checksums["t10k-images-idx3-ubyte.gz"] = "0" * 32
    monkeypatch.setattr(fm, "FILES", checksums)
    with pytest.raises(MultidevError, match="t10k-images-idx3-ubyte.gz fails its MD5 check"):
        fm.fetch(tmp_path)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/fashion-mnist is not beside the checkout")
def test_real_labels_with_missing_images_say_where_to_put_them(tmp_path):
    for name in LABELS:
        shutil.copy(SHARED / name, tmp_path / name)
    with pytest.raises(MultidevError, match="train-images-idx3-ubyte.gz is missing"):
        fm.fetch(tmp_path, download=False)
