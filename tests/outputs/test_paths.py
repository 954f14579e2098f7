"""Where a run writes, checked before it trains (contract: Errors)."""

import json

import numpy as np
import pytest

from multidev.errors import MultidevError
from multidev.outputs.paths import check_paths


def test_a_checkpoint_of_a_newer_multidev_may_be_written_over(tmp_path):
    """Its own run resumes it (or says to upgrade): it is no foreign file."""
    meta = np.frombuffer(json.dumps({"format": "multidev-checkpoint/99"}).encode(), np.uint8)
    np.savez(tmp_path / "new.npz", __meta__=meta)
    check_paths({"--checkpoint": str(tmp_path / "new.npz")}, {}, {}, checkpoint="--checkpoint")
    np.savez(tmp_path / "mine.npz", weights=np.ones(2))
    with pytest.raises(MultidevError, match="exists and is not a multidev checkpoint"):
        check_paths({"--checkpoint": str(tmp_path / "mine.npz")}, {}, {}, checkpoint="--checkpoint")


def test_a_trace_folder_at_the_root_or_made_anew(tmp_path):
    check_paths({}, {"--trace": "/"}, {})
    check_paths({}, {"--trace": str(tmp_path / "a" / "b")}, {})
    (tmp_path / "f").write_text("x")
    with pytest.raises(MultidevError, match="is a file: give a folder"):
        check_paths({}, {"--trace": str(tmp_path / "f")}, {})
