import functools
import hashlib
import http.server
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from multidev import MultidevError
from multidev.data import batches, digits, epoch_order, load_dataset, synthetic
from multidev.data import fashion_mnist as fm
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


def test_idx_round_trip(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (7, 28, 28), dtype=np.uint8)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        write_idx(tmp_path / name, images)
        assert np.array_equal(read_idx(tmp_path / name), images)


@pytest.mark.parametrize("payload", [b"", b"garbage!", b"\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02"])
def test_corrupt_idx_is_a_clear_error(tmp_path, payload):
    (tmp_path / "bad-idx1-ubyte").write_bytes(payload)
    with pytest.raises(MultidevError, match="bad-idx1-ubyte"):
        read_idx(tmp_path / "bad-idx1-ubyte")


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
    with pytest.raises(MultidevError) as err:
        fm.fetch(tmp_path, url="http://127.0.0.1:9/")  # discard port: nothing listens
    assert "train-images-idx3-ubyte.gz" in str(err.value) and str(tmp_path) in str(err.value)


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


def test_digits_is_real_and_fixed():
    a, b = digits(), digits()
    assert a.x_train.shape[1:] == (1, 8, 8) and len(a.x_train) + len(a.x_test) == 1797
    assert len(a.x_test) == 360 and np.array_equal(a.y_test, b.y_test)
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0
    assert np.bincount(a.y_test).min() >= 35  # stratified


def test_synthetic_is_deterministic():
    assert np.array_equal(synthetic().x_train, synthetic().x_train)


def test_epoch_order_depends_on_seed_and_epoch_only():
    assert np.array_equal(epoch_order(100, 3, 2), epoch_order(100, 3, 2))
    assert not np.array_equal(epoch_order(100, 3, 1), epoch_order(100, 3, 2))
    assert sorted(epoch_order(100, 3, 1)) == list(range(100))


def test_batches_keep_the_remainder():
    sizes = [len(b) for b in batches(np.arange(10), 4)]
    assert sizes == [4, 4, 2]


def test_unknown_dataset():
    with pytest.raises(MultidevError, match="unknown data set"):
        load_dataset("cifar")
