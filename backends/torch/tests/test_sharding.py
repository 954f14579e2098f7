"""The torch engine's sharding over processes keeps the replicated run's additions: the same bits.

In one process the kit holds it to the same bits (``shard_rtol = 0``); over
processes the gradients cross through the replicated run's all-reduce and
the rows through sums with zeros, so nothing may differ there either.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidev.outputs import checkpoint as ckpt
from multidev.testing.processes import run
from multidev.testing.sharding import SHARDED


def assert_identical(got: dict, want: dict, what: str) -> None:
    for name, value in want.items():
        assert np.array_equal(got[name], value), (
            f"sharding: {what}: {name} differs from the replicated run by "
            f"{float(np.max(np.abs(got[name] - value))):.2e}: torch keeps the replicated run's additions")


@pytest.mark.slow
def test_processes_at_every_level_are_two_devices_bit_for_bit(tmp_path):
    """2 processes at each level against 2 devices replicated; 2 processes x 2 devices against themselves
    replicated (which add a process's devices first, so not as 4 devices do)."""
    job = ["--dtype", "float64", "--optimizer", "adamw", "--lr", "0.002", "--weight-decay", "0.01"]
    both = ["--processes", "2", "--devices", "2"]
    runs = {"2 devices": ["--devices", "2"], "2 processes x 2 devices": both,
            **{f"2 processes {level}": ["--processes", "2", "--shard", level] for level in SHARDED},
            "2 processes x 2 devices parameters": [*both, "--shard", "parameters"]}
    for name, argv in runs.items():
        run("torch", *argv, *job, "--checkpoint", str(tmp_path / f"{name}.npz"))

    def saved(name: str) -> dict:
        path = tmp_path / f"{name}.npz"
        return {**ckpt.load(path)[1], **ckpt.load_optimizer_state(path)}

    for name in runs:
        if name.endswith(SHARDED):
            want = "2 processes x 2 devices" if "x 2" in name else "2 devices"
            assert_identical(saved(name), saved(want), f"{name} against {want} replicated")
