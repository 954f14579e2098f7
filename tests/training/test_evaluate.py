"""The core's evaluation loop (contract: Evaluation): every test sample once; a miscounting engine is an engine bug."""

import pytest

from multidev import Setup, evaluate, reference, replicate
from multidev.rules.devices import resolve_devices
from multidev.testing import LENET, batch
from multidev.testing.fake import FakeEngine


def replicas(k: int, fault=None):
    """The fake engine in float64: the reference's own arithmetic, so the sums agree to rounding."""
    return replicate(FakeEngine(fault), Setup(LENET, resolve_devices(devices=k), dtype="float64"), LENET.init(0))


@pytest.mark.parametrize("k, batch_size", [(1, 37), (2, 8), (3, 2), (4, 5)])
def test_loss_and_accuracy_over_the_whole_set(k, batch_size):
    x, y = batch(LENET, 37, seed=1)
    loss_sum, correct, _ = reference.layers.softmax_cross_entropy(reference.predict(LENET, LENET.init(0), x), y, 37)
    loss, acc, total = evaluate(replicas(k), x, y, batch_size=batch_size)
    assert total == 37 and acc == correct / 37
    assert loss == pytest.approx(loss_sum / 37, rel=1e-12)


@pytest.mark.parametrize("fault, counted", [("count-twice", 42), ("drop-a-sample", 32)])
def test_an_engine_that_miscounts_is_stopped(fault, counted):
    x, y = batch(LENET, 37, seed=1)
    with pytest.raises(RuntimeError, match=f"^evaluation counted {counted} samples, the set has 37$"):
        evaluate(replicas(1, fault), x, y, batch_size=8)
