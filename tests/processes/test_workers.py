"""The launcher of a job of several processes on this machine: what it refuses before any worker starts."""

import pytest

import multidev
from multidev import MultidevError
from multidev.testing.fake import FakeEngine


class SyncInOneProcessOnly(FakeEngine):
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm", "multi_process"})


def test_the_launcher_refuses_what_the_workers_could_not_run():
    """One line before any worker starts (the fake engine has no launcher: reaching it would fail otherwise)."""
    with pytest.raises(MultidevError, match="does not offer sync_batchnorm_processes: use batchnorm='local' with "
                                            "processes"):
        multidev.train(SyncInOneProcessOnly(), model="lenet", dataset="digits", batchnorm="sync", processes=2)
