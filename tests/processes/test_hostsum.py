"""Sums through this machine's shared memory: the same numbers as adding the ranks' arrays in rank order."""

import mmap
import multiprocessing
import os
import subprocess

import numpy as np
import pytest

from multidev import ProcessGroup
from multidev.engines.registry import installed
from multidev.processes import hostsum
from multidev.processes.hostsum import HostSum, one_machine
from multidev.testing.processes import LENET_JOB, THREADS, assert_same, command, free_port

ONE_MACHINE = {"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3", "MASTER_PORT": "29555"}


def _values(rank: int, step: int, numel: int) -> np.ndarray:
    return np.random.default_rng(100 * step + rank).normal(size=numel) * 10.0 ** rank


def _everyone_agrees(votes: np.ndarray) -> np.ndarray:
    return np.ones_like(votes)  # the engines' all_sum is a real collective; here every rank votes yes


def _worker(way: str, rank: int, size: int, numel: int, barrier, results) -> None:
    os.environ.update(ONE_MACHINE, WORLD_SIZE=str(size), LOCAL_WORLD_SIZE=str(size))
    shared = HostSum.open(numel, np.float64, ProcessGroup(rank, size), barrier.wait, _everyone_agrees,
                          sets=2 if way == "gather" else 1)
    for step in range(3):  # the later sums must not see an earlier one's values
        slot = shared.slot()
        assert slot.ctypes.data % 64 == 0  # JAX's CPU client wraps memory so aligned without a copy
        slot[:] = _values(rank, step, numel)
        if way == "sum":
            results[(rank, step)] = shared.sum().copy()
        else:  # the ranks' slots, added up here as JAX's update adds them
            slots = shared.gather()
            total = slots[0].copy()
            for other in slots[1:]:
                total += other
            results[(rank, step)] = total
            barrier.wait()  # the update has read the slots (JAX: the next step depends on it)


@pytest.mark.parametrize("way", ["sum", "gather"])
@pytest.mark.parametrize("size, numel", [(2, 1001), (3, 10)])
def test_every_rank_gets_the_sum_in_rank_order_bit_for_bit(way, size, numel):
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier, results = manager.Barrier(size), manager.dict()
        workers = [context.Process(target=_worker, args=(way, r, size, numel, barrier, results)) for r in range(size)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert [w.exitcode for w in workers] == [0] * size
        for step in range(3):
            expected = _values(0, step, numel)
            for rank in range(1, size):
                expected = expected + _values(rank, step, numel)  # as the devices of one process are summed
            for rank in range(size):
                np.testing.assert_array_equal(results[(rank, step)], expected)
    port = ONE_MACHINE["MASTER_PORT"]
    assert not [p for p in os.listdir(hostsum.FOLDER) if f"-{port}-" in p]  # nothing left behind


def test_each_way_refuses_the_other_ways_slots():
    shared = HostSum(mmap.mmap(-1, 4096), 10, np.dtype(np.float32), ProcessGroup(0, 2), lambda: None)
    with pytest.raises(ValueError, match="sets=2"):
        shared.gather()
    two = HostSum(mmap.mmap(-1, 8192), 10, np.dtype(np.float32), ProcessGroup(0, 2), lambda: None, sets=2)
    with pytest.raises(ValueError, match="sets=1"):  # its slots alternate: sum would add a stale set
        two.sum()


@pytest.mark.parametrize("env, shared", [
    (ONE_MACHINE, True),
    ({**ONE_MACHINE, "LOCAL_WORLD_SIZE": "1"}, False),     # machines of one process each: over the network
    ({k: v for k, v in ONE_MACHINE.items() if k != "MASTER_PORT"}, False),
    ({**ONE_MACHINE, "MULTIDEV_HOST_SUM": "off"}, False),
    ({}, False),
])
def test_only_a_job_on_one_machine_sums_through_shared_memory(env, shared):
    assert one_machine(env) is shared


def test_a_rank_that_cannot_share_makes_every_rank_use_the_network(monkeypatch):
    monkeypatch.setattr(os, "environ", dict(ONE_MACHINE))
    one_says_no = lambda votes: np.array([1.0, 0.0, 1.0])  # noqa: E731 - rank 1 lacks the room
    made = HostSum.open(10, np.float32, ProcessGroup(0, 3), lambda: pytest.fail("no file, no barrier"), one_says_no)
    assert made is None


RUNTIMES = {"torch": "gloo", "mxnet": "the kvstore's servers", "jax": "XLA's collectives inside the compiled step"}


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(RUNTIMES))
def test_a_job_on_one_machine_sums_through_shared_memory_and_trains_as_over_the_runtime(engine, tmp_path):
    """The engines that use it say so, and their float64 job ends bit for bit where the runtime's sum ends."""
    if engine not in installed():
        pytest.skip(f"the {engine} engine is not installed")
    saved = {}
    for way, env in (("shared memory", {}), (RUNTIMES[engine], {hostsum.ENV: "off"})):
        saved[way] = tmp_path / f"{way}.npz"
        done = subprocess.run(command(engine, *LENET_JOB, "--epochs", "1", "--dtype", "float64", "--processes", "2",
                                      "--threads", THREADS, "--master", f"127.0.0.1:{free_port()}",
                                      "--checkpoint", str(saved[way])),
                              capture_output=True, text=True, timeout=600, env={**os.environ, **env})
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"gradients summed over the processes through {way}\n" in done.stdout
    assert_same(*saved.values(), f"{engine}: the sums through shared memory are not the runtime's", rtol=0.0)
