"""The kit must fail, naming the promise, when an engine breaks one (checked on the fake engine's faults)."""

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from multidev.outputs.result import EpochRecord, Result, save_json
from multidev.testing import settled_accuracy
from multidev.testing.fake import FAULTS

#: fault -> (the kit's checks to run, what the failure must say)
CAUGHT_BY = {
    "drop-remainder": ("test_each_device_holds_its_shard", "placement: batch 5 on 2 devices, device 0 holds rows"),
    "skip-broadcast": ("test_replicas_identical_after_steps and local", "replicate: replicas drift apart"),
    "count-twice": ("test_every_sample_counted_once",
                    "evaluation: the engine counted 42 samples of 37 on 1 device(s) in batches of 8"),
    "drop-a-sample": ("test_every_sample_counted_once",
                      "evaluation: the engine counted 32 samples of 37 on 1 device(s) in batches of 8"),
    "softmax-predict": ("test_logits_in_sample_order_on_every_device_count",
                        "evaluation: logits on 1 device(s) differ from the float64 truth"),
    "skip-allreduce": ("test_float32_gradients_equal_float64_truth and lenet-11",
                       "aggregation: lenet gradient (local BatchNorm, float32) on 2 device(s)"),
    "weigh-1/k": ("test_float32_gradients_equal_float64_truth and lenet-11",
                  "aggregation: lenet gradient (local BatchNorm, float32) on 2 device(s), batch 11 cut [6, 5]"),
    "decoupled-sgd-decay": ("test_recipe_optimizer_equals_formula and nesterov",
                            "optimizers: three sgd-nesterov-decay updates on 1 device(s)"),
    "maxpool-averages": ("test_each_layer_alone_equals_float64_truth and MaxPool2d and not stride",
                         "models: layer MaxPool2d alone: the inference logits (float64) are not the float64 truth"),
    "shared-sums": ("test_sums_read_after_later_steps_are_each_steps_own",
                    "pending sums: step 1 of 3 on 2 device(s), read after the later steps were queued"),
    "pair-local-sync": ("test_five_float64_steps_of_a_definition_equal_the_truth",
                        "models: 5 float64 steps of a residual network with dropout on 2 device(s) (sync BatchNorm)"),
    "bn-eps": ("test_each_layer_alone_equals_float64_truth and BatchNorm-images", "models: layer BatchNorm-images alone"),
    "flip-relus": ("test_float32_gradients_equal_float64_truth and lenet-11",
                   "aggregation: lenet gradient (local BatchNorm, float32) on 1 device(s)"),
}

BROKEN_ENGINE = '''

class Test{name}(Conformance):
    accuracy_device_counts = ()

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls):
        return FakeEngine(fault={fault!r})
'''


def class_name(fault: str) -> str:
    return "Broken" + "".join(part.capitalize() for part in re.split(r"\W+", fault))


@pytest.fixture(scope="module")
def kit_on_broken_engines(tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    """One pytest run of the kit on every broken engine: fault -> [(check, failure text)] of the checks that failed."""
    folder = tmp_path_factory.mktemp("broken")
    tests = folder / "test_broken.py"
    tests.write_text("import pytest\nfrom multidev.testing import Conformance\nfrom multidev.testing.fake import "
                     "FakeEngine\n" + "".join(BROKEN_ENGINE.format(name=class_name(f), fault=f) for f in CAUGHT_BY))
    selection = " or ".join(f"(Test{class_name(f)} and {checks})" for f, (checks, _) in CAUGHT_BY.items())
    # -m: the checks named, quick or slow (multidev's pytest plugin deselects slow ones where no -m is given)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests), "-k", selection,
                           "-m", "slow or not slow", "--junitxml", str(folder / "report.xml")], capture_output=True,
                          text=True, timeout=600, cwd=folder)
    assert proc.returncode == 1, f"the kit failed none of the broken engines, or could not run\n{proc.stdout[-3000:]}"
    failed: dict[str, list[tuple[str, str]]] = {f: [] for f in CAUGHT_BY}
    for case in ET.parse(folder / "report.xml").iter("testcase"):
        fault = next(f for f in CAUGHT_BY if case.get("classname").endswith(f"Test{class_name(f)}"))
        for failure in case.iter("failure"):
            failed[fault].append((case.get("name"), (failure.get("message") or "") + (failure.text or "")))
    return failed


def test_every_fault_is_tried():
    assert set(CAUGHT_BY) == set(FAULTS)
    assert len({class_name(f) for f in FAULTS}) == len(FAULTS)


@pytest.mark.parametrize("fault", sorted(CAUGHT_BY))
def test_kit_names_the_broken_promise(fault, kit_on_broken_engines):
    _, message = CAUGHT_BY[fault]
    failures = kit_on_broken_engines[fault]
    assert failures, f"the kit did not notice: {fault} ({FAULTS[fault]})"
    assert any(message in text for _, text in failures), failures


def test_settled_accuracy_is_the_best_of_the_last_three_epochs(tmp_path):
    epochs = [EpochRecord(e + 1, 1.0, 0.5, acc, 1.0, 1.0) for e, acc in enumerate([0.99, 0.7, 0.93, 0.8])]
    result = Result("fake", ["cpu:0"], "lenet", "digits", 128, 0.1, 0, "local", 360, epochs=epochs)
    save_json(result, tmp_path / "out.json")
    for form in (result, tmp_path / "out.json", str(tmp_path / "out.json"), result.to_dict()):
        assert settled_accuracy(form) == 0.93  # not the 0.99 of epoch 1, before the last three
    with pytest.raises(ValueError, match="no epochs: a run that trained nothing has no settled accuracy"):
        settled_accuracy(Result("fake", ["cpu:0"], "lenet", "digits", 128, 0.1, 0, "local", 360))
