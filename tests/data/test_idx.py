"""The IDX reader and writer: round trips, and a corrupt file named in one error."""

import numpy as np
import pytest

from multidev import MultidevError
from multidev.data.idx import read_idx, write_idx


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
