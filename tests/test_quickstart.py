"""The README's main job, as a user runs it: ResNet-18 on digits, two virtual devices.

Its accuracy band (10 epochs, the same settings) is the torch kit's (backends/torch/tests/test_conformance.py);
here the command itself, for one epoch: what it trains on and the lines it prints, in the README's form.
"""

import json
import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_quickstart_command_trains_resnet18_on_digits_on_two_devices(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "multidev", "train", "--devices", "2", "--no-progress", "--epochs",
                           "1", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["model"] == "resnet18" and result["dataset"] == "digits" and len(result["devices"]) == 2
    assert result["test_total"] == 360
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"epoch 1/1: loss [\d.]+, train acc [\d.]+, test acc [\d.]+, [\d.]+ sec, \d+ samples/sec",
                        lines[-2]), lines
    assert re.fullmatch(r"test acc: [\d.]+, [\d.]+ sec/epoch on \[cpu:0, cpu:1\]", lines[-1]), lines
