"""multidev under Ray Train (examples/ray_train.py), in the optional lane .ci/ray: a worker killed mid-epoch,
Ray starts the worker group again, multidev resumes from its own checkpoint and ends with the parameters of a
run that was never interrupted, bit for bit.

torch runs under ``TorchTrainer``; JAX and MXNet under the generic ``DataParallelTrainer``, each worker joining
its job from the variables the example sets (Ray's ``JaxTrainer`` starts nothing for JAX on CPU).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import multidev
from multidev.outputs import checkpoint as ckpt
from multidev.testing.processes import assert_same, job_processes

ray = pytest.importorskip("ray", reason="Ray is not installed: the optional lane .ci/ray installs ray[train]")
pytest.importorskip("ray.train", reason="Ray Train is not installed: the optional lane .ci/ray installs ray[train]")

# Ray's data package warns about its own deprecated settings as it loads: nothing to act on here
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray_train.py"
#: the job: 512 synthetic samples at 50 a step are 11 updates an epoch; rank 0 saves after every 3rd update
RUN = dict(model="lenet", dataset="synthetic", epochs=2, batch_size=50, checkpoint_every=3)
#: rank 1 dies at its first sum after rank 0 saved at or past this (epoch, step): mid-epoch 2
KILL_AFTER = (2, 4)


def _example():
    """examples/ray_train.py as a module whose functions Ray ships by value (it is no installed package)."""
    spec = importlib.util.spec_from_file_location("multidev_ray_train_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return module


def _die_in_epoch_2(backend: str, checkpoint: str, marker: str) -> None:
    """Make this worker SIGKILL itself before its first sum once rank 0's checkpoint is at ``KILL_AFTER``.

    The engine's ``all_sum`` runs once per update on every rank; rank 0 saves
    before its next update's sum, so the kill comes at most two updates after
    the save, well inside epoch 2. The marker file says where, and that it
    happened (once: a restarted worker finds it and trains on).
    """
    distributed = importlib.import_module(f"multidev_{backend}.distributed")
    original = distributed.all_sum

    def all_sum(values: np.ndarray) -> np.ndarray:
        if os.path.isfile(checkpoint) and ckpt.resumes_at(checkpoint) >= KILL_AFTER:
            epoch, step = ckpt.resumes_at(checkpoint)
            Path(marker).write_text(f"{epoch} {step} {time.time()}")
            os.kill(os.getpid(), signal.SIGKILL)
        return original(values)

    distributed.all_sum = all_sum


def _dying_once(worker: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """The example's worker function, that logs each start and whose rank 1 dies once in epoch 2."""

    def run(config: dict[str, Any]) -> Any:
        import ray.train
        rank = ray.train.get_context().get_world_rank()
        at = ckpt.resumes_at(config["checkpoint"]) if os.path.isfile(config["checkpoint"]) else (1, 0)
        with open(config["starts"], "a") as log:
            log.write(f"{rank} {at[0]} {at[1]} {time.time()}\n")
        if rank == 1 and not os.path.exists(config["marker"]):
            _die_in_epoch_2(config["backend"], config["checkpoint"], config["marker"])
        return worker(config)

    return run


@pytest.fixture(scope="module")
def example():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    try:
        yield _example()
    finally:
        ray.shutdown()


@pytest.mark.parametrize("backend", ["torch", "jax", "mxnet"])
def test_a_worker_killed_mid_epoch_is_restarted_by_ray_and_the_job_ends_as_if_never_stopped(example, backend,
                                                                                            tmp_path, monkeypatch):
    if backend not in multidev.installed_backends():
        pytest.skip(f"the {backend} engine is not installed")
    reference = tmp_path / "uninterrupted.npz"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the Ray workers: torch's sums at 2 threads differ in the last bit
    multidev.train(backend, processes=2, devices=1, checkpoint=str(reference), progress=False, **RUN)

    config = {"checkpoint": str(tmp_path / "ray.npz"), "threads": 1, "settings": RUN,
              "marker": str(tmp_path / "killed"), "starts": str(tmp_path / "starts")}
    trainer = example.trainer(backend, config, workers=2, max_failures=1, storage=str(tmp_path / "ray"),
                              name=f"multidev-{backend}", worker=_dying_once(example.train_worker))
    result = trainer.fit()

    assert result.error is None, result.error
    *killed_at, killed = (tmp_path / "killed").read_text().split()
    killed_at = tuple(int(n) for n in killed_at)
    assert killed_at >= KILL_AFTER and killed_at[0] == 2, f"rank 1 died after a save at {killed_at}"
    starts = sorted(tuple(int(n) for n in line.split()[:3]) + (float(line.split()[3]),)
                    for line in (tmp_path / "starts").read_text().splitlines())
    assert [s[0] for s in starts] == [0, 0, 1, 1], f"two starts of each rank expected: {starts}"
    restarted = max(starts[:2])[1:3]
    print(f"{backend}: rank 1 killed after the save at {killed_at}; the group started again at {restarted}, "
          f"{max(starts[:2])[3] - float(killed):.1f} s later")
    assert restarted >= killed_at, f"the restarted group began at {restarted}, the checkpoint was at {killed_at}"
    assert restarted[0] == 2 and restarted[1] > 0, "the restart resumed mid-epoch 2 from the job's checkpoint"

    trained = result.return_value
    assert [e.epoch for e in trained.epochs] == [1, 2]
    _, got, meta = ckpt.load(config["checkpoint"])
    assert meta["epoch"] == 2 and sorted(got) == sorted(ckpt.load(reference)[1])
    assert_same(Path(config["checkpoint"]), reference, f"{backend}: resumed under Ray vs uninterrupted", rtol=0.0)
    deadline = time.monotonic() + 30  # MXNet's scheduler and server of the killed group end once heartbeats stop
    while job_processes(config["checkpoint"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not job_processes(config["checkpoint"]), "a helper process of the job outlived it"
