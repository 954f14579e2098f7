"""The kit must fail, naming the promise, when an engine breaks one (checked on the fake engine's faults)."""

import subprocess
import sys

import pytest

from multidev.testing.fake import FAULTS

#: fault -> (the kit's checks to run, what the failure must say)
CAUGHT_BY = {
    "drop-remainder": ("test_each_device_holds_its_shard", "placement: batch 5 on 2 devices, device 0 holds rows"),
    "skip-broadcast": ("test_replicas_identical_after_steps and local", "replicate: replicas drift apart"),
    "count-twice": ("test_every_sample_counted_once", "evaluation counted"),
    "skip-allreduce": ("test_float32_gradients_equal_float64_truth and lenet-11",
                       "aggregation: lenet gradient (local BatchNorm, float32) on 2 device(s)"),
    "weigh-1/k": ("test_float32_gradients_equal_float64_truth and lenet-11",
                  "aggregation: lenet gradient (local BatchNorm, float32) on 2 device(s), batch 11 cut [6, 5]"),
    "decoupled-sgd-decay": ("test_recipe_optimizer_equals_formula and nesterov",
                            "optimizers: three sgd-nesterov-decay updates on 1 device(s)"),
}

KIT_ON_A_BROKEN_ENGINE = '''
import pytest
from multidev.testing import Conformance
from multidev.testing.fake import FakeEngine


class TestBrokenEngine(Conformance):
    accuracy_device_counts = ()

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls):
        return FakeEngine(fault={fault!r})
'''


def test_every_fault_is_tried():
    assert set(CAUGHT_BY) == set(FAULTS)


@pytest.mark.parametrize("fault", sorted(CAUGHT_BY))
def test_kit_names_the_broken_promise(fault, tmp_path):
    selection, message = CAUGHT_BY[fault]
    tests = tmp_path / "test_broken.py"
    tests.write_text(KIT_ON_A_BROKEN_ENGINE.format(fault=fault))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(tests),
                           "-k", selection], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 1, f"the kit did not notice: {fault}\n{proc.stdout[-2000:]}"
    assert message in proc.stdout, proc.stdout[-3000:]
