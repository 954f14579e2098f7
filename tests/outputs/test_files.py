"""Every output is written beside its target and renamed over it (contract: Checkpoints and interruption)."""

import os
import subprocess
import sys

import pytest

from multidev import ModelSpec, save_checkpoint
from multidev.outputs.files import remove_stale_temporaries
from multidev.outputs.result import write_text_atomic


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    spec = ModelSpec("lenet", (1, 16, 16), 10)
    target = tmp_path / "ck.npz"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".ck.npz.{dead.stdout.strip()}.abc.tmp"
    live = tmp_path / f".ck.npz.{os.getppid()}.def.tmp"  # a writer that is still running
    other = tmp_path / f".other.npz.{dead.stdout.strip()}.ghi.tmp"
    for f in (stale, live, other):
        f.write_bytes(b"half")
    save_checkpoint(target, spec, spec.init(0), epoch=1, seed=0)
    assert not stale.exists() and live.exists() and other.exists()
    assert remove_stale_temporaries(target) == []


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_follow_the_umask(tmp_path, umask, mode):
    spec = ModelSpec("lenet", (1, 16, 16), 10)
    old = os.umask(umask)
    try:
        save_checkpoint(tmp_path / "ck.npz", spec, spec.init(0), epoch=1, seed=0)
        write_text_atomic(tmp_path / "out.json", "{}")
    finally:
        os.umask(old)
    for name in ("ck.npz", "out.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode, name
