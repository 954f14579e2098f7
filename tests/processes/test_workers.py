"""The launcher of a job of several processes on this machine: what it refuses before any worker starts."""

import pytest

import multidev
from multidev import MultidevError
from multidev.testing.fake import FakeEngine


class SyncInOneProcessOnly(FakeEngine):
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm", "multi_process"})


def test_the_launcher_refuses_what_the_workers_could_not_run():
    """One line before any worker starts (the fake engine has no launcher: reaching it would fail otherwise)."""
    with pytest.raises(MultidevError, match="does not offer sync_batchnorm_processes: use --batchnorm local with "
                                            "processes"):
        multidev.train(SyncInOneProcessOnly(), model="mlp", dataset="digits", batchnorm="sync", processes=2)


@pytest.mark.slow
def test_arrays_made_in_python_reach_the_workers_and_train_as_on_devices(tmp_path):
    import numpy as np

    from multidev.data import arrays
    from multidev.outputs import checkpoint as ckpt
    rng = np.random.default_rng(0)
    y = np.arange(300) % 4
    x = (rng.normal(0, 1, (300, 1, 6, 6)) + y[:, None, None, None]).astype(np.float32)
    data = arrays(x, y, name="mine")
    run = dict(model="mlp", dataset=data, epochs=2, batch_size=50, augment="flip", normalize="auto",
               progress=False)
    by_processes = multidev.train("torch", processes=2, devices=1, checkpoint=tmp_path / "p.npz", **run)
    multidev.train("torch", devices=2, checkpoint=tmp_path / "d.npz", **run)
    assert by_processes.dataset == "mine" and by_processes.test_total == 60
    got, want = ckpt.load(tmp_path / "p.npz")[1], ckpt.load(tmp_path / "d.npz")[1]
    assert all(np.allclose(got[n], want[n], rtol=1e-5, atol=1e-7) for n in want)
