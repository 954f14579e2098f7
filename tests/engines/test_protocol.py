"""What the core checks before an engine sees a run: the Setup, and the engine's claims in replicate and train."""

import dataclasses

import pytest

import multidev
from multidev import Device, MultidevError, ProcessGroup, Setup
from multidev.testing import LENET
from multidev.testing.fake import FakeEngine


class Float32Only(FakeEngine):
    capabilities = frozenset({"virtual_cpu", "sync_batchnorm"})


def test_a_single_process_is_a_group_of_one():
    setup = Setup(LENET, ["cpu:0", "cpu:1"])
    assert setup.group == ProcessGroup(rank=0, size=1)
    assert setup.devices == (Device("cpu", 0), Device("cpu", 1))
    assert setup.needs() == {"virtual_cpu"}


@pytest.mark.parametrize("change, match", [
    ({"batchnorm": "global"}, "unknown batchnorm 'global'"),
    ({"dtype": "float16"}, "unknown dtype 'float16'"),
    ({"devices": ()}, "need at least one device"),
])
def test_a_bad_setup_is_one_clear_error(change, match):
    with pytest.raises(MultidevError, match=match):
        dataclasses.replace(Setup(LENET, ["cpu:0"]), **change)


@pytest.mark.parametrize("setup, missing", [
    (Setup(LENET, ["cpu:0"], dtype="float64"), "float64: leave dtype at float32"),
    (Setup(LENET, ["cpu:0"], group=ProcessGroup(1, 2)), "multi_process: run one process"),
    (Setup(LENET, ["gpu:0"]), "gpu: use CPU devices"),
])
def test_the_core_refuses_what_an_engine_does_not_claim(setup, missing):
    with pytest.raises(MultidevError, match=f"the fake engine does not offer {missing}"):
        multidev.replicate(Float32Only(), setup, LENET.init(0))


def test_train_takes_an_engine_object_and_refuses_an_unclaimed_dtype():
    data = multidev.data.synthetic(n_train=8, n_test=4, shape=LENET.in_shape)
    with pytest.raises(MultidevError, match="does not offer float64"):
        multidev.train(Float32Only(), model="lenet", dataset=data, epochs=1, dtype="float64")
    result = multidev.train(FakeEngine(), devices=2, model="lenet", dataset=data, epochs=1, batch_size=4)
    assert result.backend == "fake" and result.test_total == 4
    assert result.version.startswith("fake (not installed), numpy ")
