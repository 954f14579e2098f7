"""The process group: where a worker stands in the environment, and the ranks a group can have."""

import pytest

from multidev import MultidevError, ProcessGroup
from multidev.processes.group import from_environment


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


@pytest.mark.parametrize("rank, size", [(1, 1), (-1, 2), (0, 0)])
def test_a_rank_outside_its_group_is_refused(rank, size):
    with pytest.raises(MultidevError, match="need 0 <= rank < size"):
        ProcessGroup(rank, size)
