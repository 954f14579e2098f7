"""What a run needs of an engine, and how the core refuses what the engine does not claim."""

import pytest

from multidev import ProcessGroup, Setup
from multidev.engines.capabilities import needed
from multidev.errors import MultidevError
from multidev.testing import LENET
from multidev.testing.fake import FakeEngine
from multidev.training.api import train


def test_sync_batchnorm_over_processes_is_a_capability_of_its_own():
    assert needed(dtype="float32", batchnorm="sync", processes=1) == {"sync_batchnorm"}
    assert needed(dtype="float32", batchnorm="sync", processes=2) == {
        "sync_batchnorm", "multi_process", "sync_batchnorm_processes"}
    assert Setup(LENET, ["cpu:0"], "sync", group=ProcessGroup(0, 2)).needs() == needed(
        dtype="float32", batchnorm="sync", processes=2)


def test_an_engine_without_bf16_is_refused_in_one_line():
    with pytest.raises(MultidevError, match="the fake engine does not offer bf16: use --precision fp32"):
        train(FakeEngine(), precision="bf16", epochs=1)


def test_each_shard_level_is_a_capability_and_processes_one_more():
    assert needed(dtype="float32", batchnorm="local", processes=1, shard="gradients") == {"shard_gradients"}
    assert needed(dtype="float32", batchnorm="local", processes=2, shard="parameters") == {
        "shard_parameters", "shard_processes", "multi_process"}
    assert Setup(LENET, ["cpu:0"], shard="optimizer").needs() == {"shard_optimizer"}


@pytest.mark.parametrize("level, instead", [("optimizer", "use --shard none"),
                                            ("parameters", "use --shard gradients, optimizer or none")])
def test_an_engine_without_a_shard_level_is_refused_in_one_line(level, instead):
    with pytest.raises(MultidevError, match=f"the fake engine does not offer shard_{level}: {instead}"):
        train(FakeEngine(), shard=level, epochs=1)


def test_the_numpy_example_engine_refuses_sharding_before_any_step():
    from multidev.testing.sharding import level_refused

    pytest.importorskip("multidev_numpy")
    from multidev.engines.registry import load_backend

    assert level_refused(load_backend("numpy"), "gradients").startswith("the numpy engine does not offer "
                                                                        "shard_gradients")
