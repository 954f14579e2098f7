"""What a run needs of an engine, and how the core refuses what the engine does not claim."""

from multidev import ProcessGroup, Setup
from multidev.engines.capabilities import needed
from multidev.testing import LENET


def test_sync_batchnorm_over_processes_is_a_capability_of_its_own():
    assert needed(dtype="float32", batchnorm="sync", processes=1) == {"sync_batchnorm"}
    assert needed(dtype="float32", batchnorm="sync", processes=2) == {
        "sync_batchnorm", "multi_process", "sync_batchnorm_processes"}
    assert Setup(LENET, ["cpu:0"], "sync", group=ProcessGroup(0, 2)).needs() == needed(
        dtype="float32", batchnorm="sync", processes=2)
