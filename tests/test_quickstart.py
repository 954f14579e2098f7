"""The README's main job, as a user runs it: ResNet-18 on digits, two virtual devices."""

import json
import subprocess
import sys

import pytest

from multidev.testing import ACCURACY_FLOOR, settled_accuracy


@pytest.mark.slow
def test_quickstart_reaches_the_accuracy_band_on_digits(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "multidev", "train", "--devices", "2", "--no-progress",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["model"] == "resnet18" and result["dataset"] == "digits" and len(result["devices"]) == 2
    assert result["test_total"] == 360
    assert settled_accuracy(out) >= ACCURACY_FLOOR, proc.stdout
