"""The core's side of a job of several processes: where a worker stands, what it reads, what it may ask."""

import numpy as np
import pytest

import multidev
from multidev import MultidevError, ProcessGroup, Setup
from multidev.engines.capabilities import needed
from multidev.processes.group import from_environment
from multidev.processes.job import differing, digest
from multidev.rules.split import cut, cut_for_process, shard_sizes
from multidev.testing import LENET
from multidev.testing.fake import FakeEngine


@pytest.mark.parametrize("env, where", [
    ({}, None),
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (3, 4, 1)),         # torchrun, Ray Train, multidev
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}, (5, 8, 1)),  # srun
])
def test_a_worker_finds_its_place_in_the_environment(env, where):
    joined = from_environment(env)
    assert (None if joined is None else (joined.group.rank, joined.group.size, joined.local_rank)) == where


def test_a_garbled_rank_is_one_clear_error():
    with pytest.raises(MultidevError, match="whole numbers expected"):
        from_environment({"RANK": "one", "WORLD_SIZE": "2"})


def test_each_process_reads_its_own_rows_of_the_one_process_cut():
    """2 processes x 2 devices hold exactly what 1 process x 4 devices would, rank-major."""
    x, y = np.arange(30).reshape(10, 3), np.arange(10)
    index = np.random.default_rng(0).permutation(10)
    sizes = shard_sizes(10, 4)  # [3, 3, 2, 2]
    whole = cut(x[index], y[index], sizes)
    for rank in (0, 1):
        mine = cut_for_process(x, y, index, sizes, rank, 2)
        assert [a.tolist() for a in mine.x] == [a.tolist() for a in whole.x[2 * rank:2 * rank + 2]]
        assert mine.batch == 10 and mine.total == sum(sizes[2 * rank:2 * rank + 2])
        assert mine.own([0, 1, 2, 3]) == [0, 1] and mine.own([1, 2]) == ([1] if rank == 0 else [0])


def test_devices_that_sit_out_are_seen_by_every_process():
    """3 rows over 2 x 2 devices: the last device of process 1 is empty, and process 0 knows it."""
    x, y = np.zeros((3, 1)), np.zeros(3)
    mine = cut_for_process(x, y, np.arange(3), shard_sizes(3, 4), 0, 2)
    assert mine.active == [0, 1] and mine.group_active == [0, 1, 2] and mine.batch == 3


def test_ranks_with_other_settings_are_named():
    same, other = digest({"lr": 0.1}), digest({"lr": 0.2})
    assert differing([same, same]) is None
    assert differing([same, other, other]).startswith("ranks 1, 2 were started with other settings than rank 0")


def test_sync_batchnorm_over_processes_is_a_capability_of_its_own():
    assert needed(dtype="float32", batchnorm="sync", processes=1) == {"sync_batchnorm"}
    assert needed(dtype="float32", batchnorm="sync", processes=2) == {
        "sync_batchnorm", "multi_process", "sync_batchnorm_processes"}
    assert Setup(LENET, ["cpu:0"], "sync", group=ProcessGroup(0, 2)).needs() == needed(
        dtype="float32", batchnorm="sync", processes=2)


class SyncInOneProcessOnly(FakeEngine):
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm", "multi_process"})


def test_the_launcher_refuses_what_the_workers_could_not_run():
    """One line before any worker starts (the fake engine has no launcher: reaching it would fail otherwise)."""
    with pytest.raises(MultidevError, match="does not offer sync_batchnorm_processes: use batchnorm='local' with "
                                            "processes"):
        multidev.train(SyncInOneProcessOnly(), model="lenet", dataset="digits", batchnorm="sync", processes=2)


def test_the_worker_killed_is_named_not_the_one_that_lost_it():
    """Rank 1 is killed and rank 0, its peer gone, exits with an error within the same poll."""
    import signal

    from multidev.processes.spawn import cause

    assert cause([(0, 2), (1, -signal.SIGKILL)]) == (1, -signal.SIGKILL)
    assert cause([(0, -signal.SIGTERM), (1, 3)]) == (0, -signal.SIGTERM)  # the launcher's SIGTERM: order decides
    assert cause([(2, 1), (0, 2)]) == (2, 1)
