"""torchrun starts the workers itself; multidev joins from its environment and trains as --processes does."""

import os
import shutil
import subprocess
import sys

import pytest

import multidev
from multidev.testing import SAME_ENGINE_RTOL, assert_states_close

JOB = ["--backend", "torch", "--epochs", "1", "--batch-size", "512", "--no-progress"]


@pytest.mark.slow
def test_torchrun_trains_as_processes_does(tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on the PATH")
    by_torchrun, by_multidev = tmp_path / "torchrun.npz", tmp_path / "processes.npz"
    env = {"OMP_NUM_THREADS": "1"}  # what --processes 2 gives each worker on 2 cores
    run = subprocess.run([torchrun, "--nproc-per-node", "2", "-m", "multidev", "train", *JOB,
                          "--checkpoint", str(by_torchrun)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("epoch 1/1") == 1, "every rank printed, not rank 0 alone: " + run.stdout
    run = subprocess.run([sys.executable, "-m", "multidev", "train", *JOB, "--processes", "2", "--threads", "1",
                          "--checkpoint", str(by_multidev)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    _, got, _ = multidev.load_checkpoint(by_torchrun)
    _, want, _ = multidev.load_checkpoint(by_multidev)
    assert_states_close(got, want, rtol=SAME_ENGINE_RTOL, promise="torchrun and --processes 2 train differently")
