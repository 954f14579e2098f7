import json
import subprocess
import sys

import multidev
from multidev.compare import RunSpec


def test_compare_runs_every_combination_and_reports_failures(tmp_path):
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "multidev", "compare", "--backends", "torch,nosuchengine",
                           "--devices", "1,2", "--model", "lenet", "--dataset", "synthetic", "--epochs", "1",
                           "--batch-size", "64", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((out / "results.json").read_text())
    assert [(r["settings"]["backend"], r["settings"]["devices"]) for r in runs] == [
        ("torch", 1), ("torch", 2), ("nosuchengine", 1), ("nosuchengine", 2)]
    assert runs[1]["result"]["devices"] == ["cpu:0", "cpu:1"] and runs[1]["error"] is None
    assert "unknown backend 'nosuchengine'" in runs[2]["error"] and runs[2]["result"] is None
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| engine | devices |") and len(table) == 6
    assert table[3].startswith("| torch | 2 | 64 |") and "failed: unknown backend" in table[4]
    for png in ("accuracy.png", "throughput.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # Same seed, same data order, same split rule: one and two devices start from the same weights,
    # and LeNet has no BatchNorm, so the first epoch's loss agrees.
    loss1, loss2 = (runs[i]["result"]["epochs"][0]["loss"] for i in (0, 1))
    assert abs(loss1 - loss2) <= 1e-4 * abs(loss1)


def test_compare_from_python_returns_outcomes():
    outcomes = multidev.compare(runs=[RunSpec("torch", 1, model="lenet", dataset="synthetic", epochs=1)])
    assert len(outcomes) == 1 and outcomes[0].error is None
    assert outcomes[0].result.test_total == 128
