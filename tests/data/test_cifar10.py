"""CIFAR-10: the binary archive checked by its MD5, used in place without the network, fetched atomically,
decoded record by record in the published layout; errors name the file and the folder."""

import contextlib
import functools
import hashlib
import http.server
import io
import re
import tarfile
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from multidev import MultidevError
from multidev.data import cifar10
from multidev.data.download import cache_dir, md5
from multidev.data.rows import Pixels

N_TRAIN, N_TEST = (2, 3, 1, 2, 2), 3  # records per train batch, test records
UNREACHABLE = "http://127.0.0.1:9/cifar-10-binary.tar.gz"  # discard port: nothing listens


def _pixel(record: int, c: int, h: int, w: int) -> int:
    """A value that differs between channels, rows, columns and records, so any transposition shows."""
    return (record * 11 + c * 100 + h * 5 + w) % 256


def _record(number: int, label: int) -> bytes:
    pixels = bytes(_pixel(number, c, h, w) for c in range(3) for h in range(32) for w in range(32))
    return bytes([label]) + pixels


def _members(bad: str = "") -> dict[str, bytes]:
    """The six batch files; records are numbered across the train batches in order, then the test batch."""
    members, number = {}, 0
    for i, n in enumerate(N_TRAIN, start=1):
        members[f"cifar-10-batches-bin/data_batch_{i}.bin"] = b"".join(
            _record(number + k, (number + k) % 10) for k in range(n))
        number += n
    members["cifar-10-batches-bin/test_batch.bin"] = b"".join(_record(100 + k, 9 - k) for k in range(N_TEST))
    if bad == "size":
        members["cifar-10-batches-bin/data_batch_3.bin"] += b"\0"
    elif bad == "missing":
        del members["cifar-10-batches-bin/data_batch_3.bin"]
    elif bad == "label":
        members["cifar-10-batches-bin/data_batch_3.bin"] = bytes([10]) + members[
            "cifar-10-batches-bin/data_batch_3.bin"][1:]
    return members


def _write_archive(folder: Path, bad: str = "") -> str:
    """A small cifar-10-binary.tar.gz in ``folder``, members stored out of order beside the real set's extras;
    returns its MD5."""
    folder.mkdir(parents=True, exist_ok=True)
    members = _members(bad)
    order = sorted(members, reverse=True) + ["cifar-10-batches-bin/batches.meta.txt"]
    members["cifar-10-batches-bin/batches.meta.txt"] = "\n".join(cifar10.CLASSES).encode()
    with tarfile.open(folder / cifar10.FILE, "w:gz") as tar:
        directory = tarfile.TarInfo("cifar-10-batches-bin")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        for name in order:
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    return md5(folder / cifar10.FILE)


@pytest.fixture
def no_network(monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("touched the network"))


@contextlib.contextmanager
def _serving(folder: Path, handler_class=http.server.SimpleHTTPRequestHandler):
    handler = functools.partial(handler_class, directory=str(folder))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_arrays_keep_batch_order_labels_and_channel_major_pixels(tmp_path, no_network):
    checksum = _write_archive(tmp_path)
    x_train, y_train, x_test, y_test = cifar10.load(tmp_path, download=False, md5=checksum)
    assert x_train.shape == (sum(N_TRAIN), 3, 32, 32) and x_test.shape == (N_TEST, 3, 32, 32)
    assert x_train.dtype == x_test.dtype == np.uint8 and y_train.dtype == y_test.dtype == np.int64
    assert y_train.tolist() == [n % 10 for n in range(sum(N_TRAIN))]  # batch 1 first though stored last
    assert y_test.tolist() == [9 - k for k in range(N_TEST)]
    for i, c, h, w in [(0, 0, 0, 0), (0, 0, 0, 31), (0, 0, 31, 0), (4, 1, 2, 3), (9, 2, 31, 31), (5, 2, 17, 8)]:
        assert x_train[i, c, h, w] == _pixel(i, c, h, w), (i, c, h, w)
    assert x_test[2, 1, 30, 4] == _pixel(102, 1, 30, 4)
    expected = np.array([[[[_pixel(100 + k, c, h, w) for w in range(32)] for h in range(32)] for c in range(3)]
                         for k in range(N_TEST)], np.uint8)
    np.testing.assert_array_equal(x_test, expected)


def test_dataset_scales_each_minibatch_to_float32(tmp_path, no_network):
    checksum = _write_archive(tmp_path)
    data = cifar10.dataset(tmp_path, download=False, md5=checksum)
    assert (data.name, data.num_classes, data.shape) == ("cifar-10", 10, (3, 32, 32))
    assert isinstance(data.x_train, Pixels) and data.x_train.stored.dtype == np.uint8  # no float copy kept
    assert len(data.x_train) == len(data.y_train) == sum(N_TRAIN) and len(data.x_test) == N_TEST
    index = np.array([7, 0, 3])
    batch = data.x_train[index]
    assert batch.dtype == np.float32 and batch.shape == (3, 3, 32, 32)
    assert 0.0 <= batch.min() and batch.max() <= 1.0 and batch.max() > 0.9
    np.testing.assert_allclose(batch, data.x_train.stored[index] / np.float32(255), rtol=1e-6)
    assert data.y_train[index].tolist() == [7, 0, 3]


def test_archive_in_place_is_used_offline(tmp_path, no_network):
    checksum = _write_archive(tmp_path)
    path = cifar10.fetch(tmp_path, download=True, url=UNREACHABLE, md5=checksum)
    assert path == tmp_path / cifar10.FILE
    assert len(cifar10.load(tmp_path, url=UNREACHABLE, md5=checksum)[0]) == sum(N_TRAIN)


def test_default_folder_is_the_xdg_cache(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cifar10.default_dir() == cache_dir("cifar-10") == tmp_path / "multidev" / "cifar-10"
    checksum = _write_archive(tmp_path / "multidev" / "cifar-10")
    assert cifar10.fetch(download=False, md5=checksum) == tmp_path / "multidev" / "cifar-10" / cifar10.FILE
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec says to ignore it
    assert cache_dir("x") == Path.home() / ".cache" / "multidev" / "x"


def test_missing_without_download_names_file_and_folder(tmp_path, no_network):
    message = f"^{re.escape(str(tmp_path / cifar10.FILE))} is missing: put cifar-10-binary.tar.gz .*into " \
              f"{re.escape(str(tmp_path))}$"
    with pytest.raises(MultidevError, match=message):
        cifar10.load(tmp_path, download=False)


def test_unreachable_download_is_one_line_and_leaves_nothing(tmp_path):
    folder = tmp_path / "new"
    message = (rf"^cannot download cifar-10-binary.tar.gz from {re.escape(UNREACHABLE)} \([^\n]*\): "
               rf"put cifar-10-binary.tar.gz into {re.escape(str(folder))} by hand$")
    with pytest.raises(MultidevError, match=message):
        cifar10.fetch(folder, url=UNREACHABLE)
    assert list(folder.iterdir()) == []  # not even the temporary file


def test_wrong_checksum_says_delete_it(tmp_path):
    _write_archive(tmp_path)
    with pytest.raises(MultidevError, match=rf"^{re.escape(str(tmp_path / cifar10.FILE))} fails its MD5 check "
                                            rf"\(got [0-9a-f]{{32}}, published {cifar10.MD5}\): delete it"):
        cifar10.load(tmp_path, url=UNREACHABLE)


def test_download_from_server_is_verified_and_atomic(tmp_path):
    checksum = _write_archive(tmp_path / "server")
    with _serving(tmp_path / "server") as base:
        x_train, _, x_test, _ = cifar10.load(tmp_path / "cache", url=base + cifar10.FILE, md5=checksum)
        with pytest.raises(MultidevError,
                           match=r"^cannot download .* \(HTTP 404 File not found\): put cifar-10-binary.tar.gz"):
            cifar10.fetch(tmp_path / "elsewhere", url=base + "nothing-here.tar.gz")
    assert x_train.shape == (sum(N_TRAIN), 3, 32, 32) and x_test.shape == (N_TEST, 3, 32, 32)
    assert (tmp_path / "cache" / cifar10.FILE).read_bytes() == (tmp_path / "server" / cifar10.FILE).read_bytes()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cifar10.FILE]  # no temporary file left
    assert list((tmp_path / "elsewhere").iterdir()) == []


class _Truncating(http.server.BaseHTTPRequestHandler):
    """Announces 10,000 bytes, sends 100 and hangs up: a dropped connection."""

    def __init__(self, *args, directory=None, **kwargs):
        super().__init__(*args, **kwargs)

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "10000")
        self.end_headers()
        self.wfile.write(b"x" * 100)
        self.close_connection = True


def test_dropped_connection_is_a_download_error_not_a_half_file(tmp_path):
    with _serving(tmp_path, _Truncating) as base, \
            pytest.raises(MultidevError, match=r"\(connection closed after 100 of 10000 bytes\): put "):
        cifar10.fetch(tmp_path / "cache", url=base + cifar10.FILE)
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("bad, problem", [
    ("size", r"data_batch_3.bin holds 3074 bytes, not one or more whole 3073-byte records"),
    ("missing", r"data_batch_3.bin is missing from the archive"),
    ("label", r"data_batch_3.bin holds label 10, not one of 0-9"),
])
def test_malformed_member_names_it_and_says_delete(tmp_path, no_network, bad, problem):
    checksum = _write_archive(tmp_path, bad)
    archive = re.escape(str(tmp_path / cifar10.FILE))
    with pytest.raises(MultidevError, match=rf"^{archive}: cifar-10-batches-bin/{problem}; delete {archive} "):
        cifar10.load(tmp_path, md5=checksum)


def test_not_an_archive_is_one_line(tmp_path, no_network):
    (tmp_path / cifar10.FILE).write_bytes(b"not a tar file")
    with pytest.raises(MultidevError,
                       match=r"^cannot read .*cifar-10-binary.tar.gz \(not a gzip file\): delete it[^\n]*$"):
        cifar10.load(tmp_path, md5=md5(tmp_path / cifar10.FILE))


def test_md5_streams_large_files_correctly(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, (1 << 20) + 12345, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert md5(tmp_path / "f") == hashlib.md5(data).hexdigest()
