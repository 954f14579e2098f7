"""Checks that compare device counts run the counts they promise, and skip where there is nothing to compare."""

from __future__ import annotations

import pytest

from multidev.errors import MultidevError
from multidev.testing import FakeEngine, LayerChecks


class Recording(FakeEngine):
    """The fake engine, remembering the device count and BatchNorm mode of every set of replicas it made."""

    def __init__(self, fault: str | None = None, *, one_device: bool = False) -> None:
        super().__init__(fault)
        self.runs: list[int] = []
        self.modes: list[str] = []
        if one_device:  # an engine with one device: the kit offers it no other count
            self.capabilities = self.capabilities - {"virtual_cpu"}

    def replicate(self, setup, state):
        self.runs.append(len(setup.devices))
        self.modes.append(setup.batchnorm)
        return super().replicate(setup, state)


class DecliningSync(Recording):
    """An engine that runs float64 with sync BatchNorm on one device only (as MXNet does)."""

    def replicate(self, setup, state):
        if setup.batchnorm == "sync" and setup.dtype == "float64" and len(setup.devices) > 1:
            raise MultidevError("float64 with sync BatchNorm on one device only: use --batchnorm local")
        return super().replicate(setup, state)


class OnlyOneDevice(LayerChecks):
    device_counts = (1,)


class NoOneOrTwo(LayerChecks):
    device_counts = (3, 4)


def test_five_float64_steps_run_on_one_device_and_on_two():
    engine = Recording()
    LayerChecks().test_five_float64_steps_of_a_definition_equal_the_truth(engine, "readme")
    assert (engine.runs, engine.modes) == ([1, 2], ["local", "sync"])


def test_five_float64_steps_run_two_devices_with_local_batchnorm_where_sync_is_declined():
    engine = DecliningSync()
    LayerChecks().test_five_float64_steps_of_a_definition_equal_the_truth(engine, "readme")
    assert (engine.runs, engine.modes) == ([1, 2], ["local", "local"])


def test_five_float64_steps_catch_an_engine_wrong_on_two_devices_only():
    """"pair-local-sync" forgets sync BatchNorm's exchange on exactly two devices, for a user's definition."""
    OnlyOneDevice().test_five_float64_steps_of_a_definition_equal_the_truth(FakeEngine("pair-local-sync"), "readme")
    with pytest.raises(AssertionError, match=r"on 2 device\(s\) \(sync BatchNorm\) are not the float64 truth"):
        LayerChecks().test_five_float64_steps_of_a_definition_equal_the_truth(FakeEngine("pair-local-sync"), "readme")


def test_five_float64_steps_on_an_engine_with_one_device_run_one():
    engine = Recording(one_device=True)
    LayerChecks().test_five_float64_steps_of_a_definition_equal_the_truth(engine, "readme")
    assert engine.runs == [1]


def test_five_float64_steps_skip_without_one_or_two_devices():
    engine = Recording()
    with pytest.raises(pytest.skip.Exception, match=r"none of the device counts \(1, 2\) runs on fake"):
        NoOneOrTwo().test_five_float64_steps_of_a_definition_equal_the_truth(engine, "readme")
    assert engine.runs == []


def test_dropout_compares_every_device_count():
    engine = Recording()
    LayerChecks().test_dropout_is_the_same_on_every_device_count(engine)
    assert engine.runs == [1, 2, 3, 4]


@pytest.mark.parametrize("checks, engine", [(LayerChecks(), Recording(one_device=True)),
                                            (OnlyOneDevice(), Recording())], ids=["engine", "test-class"])
def test_dropout_skips_with_one_device_count(checks, engine):
    """One device count, whether the engine has one device or its tests ask for one: nothing to compare."""
    with pytest.raises(pytest.skip.Exception,
                       match=r"one device count \(1\) of \(1.*\) runs on fake: a step with Dropout has no other"):
        checks.test_dropout_is_the_same_on_every_device_count(engine)
    assert engine.runs == []
