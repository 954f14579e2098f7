"""A device split into one part per core: the same numbers as the device whole, and the measured choice."""

import json

import numpy as np
import pytest

pytest.importorskip("jax")

import multidev  # noqa: E402
from multidev.testing import assert_states_close, assert_states_equal  # noqa: E402

# The model: the README's (train_readme, conftest.py): BatchNorm (in a residual block), max pooling and Dropout,
# every way a split could go wrong


@pytest.fixture
def cores(monkeypatch):
    """This process as if it had ``n`` cores (the split gives each device one part per core)."""
    from multidev_jax.forms import parts

    multidev.load_backend("jax").max_cpu_devices()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def have(n: int) -> None:
        monkeypatch.setattr(parts, "_affinity", lambda: n)
    return have


@pytest.mark.parametrize("devices, have, batchnorm", [(1, 4, "local"), (2, 4, "local"), (2, 4, "sync"),
                                                      (1, 2, "sync")])
def test_a_split_device_trains_as_the_device_whole(monkeypatch, cores, train_readme, devices, have, batchnorm):
    """contract: BatchNorm's statistics are still each device's shard's (local) or the batch's (sync)."""
    cores(have)
    monkeypatch.setenv("MULTIDEV_JAX_PARTS", "whole")
    _, whole, *_ = train_readme(devices, batchnorm)
    monkeypatch.setenv("MULTIDEV_JAX_PARTS", "split")
    reps, split, placed, x, sizes = train_readme(devices, batchnorm)
    assert reps.parts == have // devices and len(reps.mesh.devices.flat) == have
    assert_states_close(split, whole, rtol=1e-10, promise="a device split into parts computes what it computes whole")
    # each device still holds, and hands back, exactly the rows the core cut for it
    held = reps.shards(placed)
    assert [len(h) for h in held] == list(sizes)
    np.testing.assert_array_equal(np.concatenate(held), x.astype(np.float64))
    for device in range(devices):
        assert_states_equal([reps.replica_state(device), reps.replica_state(0)], promise="every device's copy")


def test_a_run_measures_once_keeps_the_choice_and_trains_as_the_chosen_form_alone(monkeypatch, cores, tmp_path,
                                                                                   afresh, train_readme):
    from multidev_jax.forms import PARTS

    cores(2)
    afresh(PARTS)
    reps, measured, *_ = train_readme(1, "local", dtype="float32")
    saved = json.loads((tmp_path / "parts.json").read_text())
    assert list(saved) == PARTS.kept.measured and len(saved) == 1, saved
    chosen = saved[PARTS.kept.measured[0]]
    assert reps.parts == (2 if chosen == "split" else 1) and reps.forms.parts == reps.parts
    assert reps.compile_seconds > 0 and f"{chosen} for 1" in PARTS.note()
    # the timed steps ran on copies: the run equals one that only ever ran the chosen form
    monkeypatch.setenv(PARTS.env, chosen)
    assert_states_equal([measured, train_readme(1, "local", dtype="float32")[1]],
                        promise="measuring the parts leaves the run as it was")
    # a later run reads the file instead of measuring: the other form, saved, is what it takes
    monkeypatch.delenv(PARTS.env)
    other = "whole" if chosen == "split" else "split"
    (tmp_path / "parts.json").write_text(json.dumps({PARTS.kept.measured[0]: other}))
    PARTS.kept.forget()
    again = train_readme(1, "local", dtype="float32")[0]
    assert again.parts == (2 if other == "split" else 1) and len(PARTS.kept.measured) == 1, "measured again"


@pytest.mark.parametrize("have, devices, omp, env, want", [
    (4, 1, "", "", 4),        # one part per core
    (4, 2, "", "", 2),
    (2, 2, "", "", 1),        # a core a device already
    (3, 2, "", "", 1),
    (4, 1, "1", "", 1),       # one thread: nothing to split over
    (4, 1, "2", "", 2),       # --threads 2: no more parts than threads
    (4, 1, "", "whole", 1),
    (16, 1, "", "", 8),       # no more parts than JAX has virtual devices: 8, the engine's default
])
def test_which_runs_can_split(monkeypatch, cores, have, devices, omp, env, want):
    import jax
    from multidev_jax.forms import parts

    cores(have)
    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.setenv(parts.PARTS.env, env)
    named = jax.devices("cpu")[:devices]
    available = len(jax.devices("cpu"))
    assert parts.split_parts(named, 1, available) == want
    assert parts.split_parts(named, 2, available) == 1, "a job's processes never split"


@pytest.mark.slow
def test_a_split_run_trains_as_the_whole_one(monkeypatch, cores):
    """``multidev.train`` as a user runs it, the split pinned: the same epoch, within float32's rounding."""
    cores(2)
    results = {}
    for form in ("whole", "split"):
        monkeypatch.setenv("MULTIDEV_JAX_PARTS", form)
        results[form] = multidev.train("jax", model="convnet", devices=1, epochs=1, batch_size=64, progress=False)
    whole, split = (results[form].epochs[-1] for form in ("whole", "split"))
    assert abs(split.loss - whole.loss) <= 1e-3 * whole.loss, (split.loss, whole.loss)
    assert abs(split.test_acc - whole.test_acc) <= 3 / results["whole"].test_total


_PROGRAMS = """
import hashlib, os
import multidev
from multidev.testing import RESNET, batch
engine = multidev.load_backend("jax")
for devices, batchnorm, form in ((2, "local", "whole"), (2, "sync", "whole"), (1, "local", "split")):
    os.environ["MULTIDEV_JAX_PARTS"] = form
    setup = multidev.Setup(RESNET, multidev.resolve_devices(devices=devices, max_cpu=8), batchnorm)
    reps = multidev.replicate(engine, setup, RESNET.init(0))
    x, y = batch(RESNET, 8)
    b = reps.place(multidev.cut(x, y, multidev.shard_sizes(8, devices)))
    args = (reps._params, reps._opt_state, reps._stats, b.x, {}, b.y, b.device_sizes, reps.dtype.type(0.1),
            reps.dtype.type(8))
    print(reps.parts, hashlib.sha256(reps._steps.train.lower(*args).as_text().encode()).hexdigest())
"""


@pytest.mark.slow
def test_the_programs_do_not_depend_on_pythons_hash_seed(tmp_path):
    """A job's processes must compile the same program (or wait for ever for each other's executables).

    Each process has its own ``PYTHONHASHSEED``; a first form of the split
    (a second mesh axis) lowered to other programs under other seeds.
    """
    import os
    import subprocess
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the split needs 2 cores")
    outs = [subprocess.run([sys.executable, "-c", _PROGRAMS], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONHASHSEED": seed}) for seed in ("1", "2")]
    assert all(out.returncode == 0 for out in outs), outs[0].stderr[-2000:] + outs[1].stderr[-2000:]
    assert outs[0].stdout.split()[-2] == "2", "the last program must be a split one"
    assert outs[0].stdout == outs[1].stdout
