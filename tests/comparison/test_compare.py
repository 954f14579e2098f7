"""multidev compare: every combination run in its own process, its float64 truth, the report and the verdicts.

The runs are the fake engine's (registered for the child processes by entry point): the grid, the truths
and the verdicts are the core's, and the fake computes in float32 and float64 as an engine does.
"""

import json
import subprocess
import sys

import pytest

import multidev
from multidev import Settings
from multidev.testing.fake import registered


@pytest.fixture
def fake_installed(tmp_path, monkeypatch) -> None:
    """This process and its children with the fake engine installed as ``fake``."""
    monkeypatch.setenv("PYTHONPATH", registered(tmp_path / "engines")["PYTHONPATH"])
    monkeypatch.syspath_prepend(str((tmp_path / "engines").resolve()))  # compare checks the engines here first


@pytest.mark.slow
def test_compare_runs_every_combination_and_reports_failures(tmp_path):
    """An installed engine that fails (its framework is missing) is a row of the table; the others still run."""
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "brokenengine.py").write_text("import no_such_framework_here\n")
    env = registered(tmp_path / "engines", {"fake": "multidev.testing.fake:FakeEngine", "broken": "brokenengine:E"})
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "multidev", "compare", "--backends", "fake,broken",
                           "--devices", "1,2", "--model", "lenet", "--dataset", "synthetic", "--epochs", "1",
                           "--batch-size", "64", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((out / "results.json").read_text())
    assert [(r["settings"]["backend"], r["settings"]["devices"], r["settings"]["dtype"]) for r in runs] == [
        ("fake", 1, "float64"), ("fake", 2, "float64"), ("fake", 1, "float32"), ("fake", 2, "float32"),
        ("broken", 1, "float32"), ("broken", 2, "float32")]
    assert runs[3]["result"]["devices"] == ["cpu:0", "cpu:1"] and runs[3]["error"] is None
    assert "cannot import no_such_framework_here" in runs[4]["error"] and runs[4]["result"] is None
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| run | engine | devices | dtype |") and len(table) == 8
    assert table[2].startswith("| fake x1 float64 | fake | 1 | float64 | 64 |") and table[2].endswith("| truth |  |")
    assert table[5].startswith("| fake x2 | fake | 2 | float32 | 64 |") and "failed: the broken engine" in table[6]
    for png in ("accuracy.png", "throughput.png", "divergence.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # Same seed, same data order, same split rule: one and two devices start from the same weights,
    # and LeNet has no BatchNorm, so the first epoch's loss agrees.
    loss1, loss2 = (runs[i]["result"]["epochs"][0]["loss"] for i in (2, 3))
    assert abs(loss1 - loss2) <= 1e-4 * abs(loss1)
    # Each float32 run is measured against the float64 run of its device count, at the first steps and
    # every epoch: 8 steps an epoch here. float32 is never float64 (float64 rounding is 1e-14); how far
    # it strays depends on the CPU (a ReLU flipped by rounding moves it by 1e-3), so no upper bound here.
    for run in runs[2:4]:
        divergence = run["divergence"]
        assert divergence["truth"] == f"fake x{run['settings']['devices']} float64"
        assert divergence["steps"] == [1, 2, 4, 8]
        assert all(1e-12 < d < 0.5 for d in divergence["max"]), divergence
        assert run["verdict"].startswith("rounding"), run["verdict"]  # its float64 run is the truth


@pytest.mark.parametrize("argv, line", [
    (["--backends", "fake,tensorflow"], "unknown backend 'tensorflow': choose one of "),
    (["--backends", "fake", "--dataset", "{data}"], "{data} is not a readable .npz file"),
    (["--backends", "fake", "--model", "{net}:build"], "{net} line 1: ModuleNotFoundError: No module named 'nope'"),
    (["--backends", "fake", "--timeout", "0"], "timeout must be a positive number of seconds, got 0.0"),
])
def test_a_mistake_is_one_line_before_any_run(tmp_path, fake_installed, argv, line):
    """An unknown engine, unreadable data or a broken model file: one line and exit 2, nothing trained first."""
    data, net = tmp_path / "broken.npz", tmp_path / "net.py"
    data.write_bytes(b"PK not a zip")
    net.write_text("import nope\n")
    argv = [a.format(data=data, net=net) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "multidev", "compare", "--devices", "1,2", "--model", "lenet",
                           "--dataset", "synthetic", "--epochs", "1", *argv, "--out", str(tmp_path / "cmp")],
                          capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    code = 1 if "Error: " in line else 2  # an error of the user's own code: Python's exit code
    assert proc.returncode == code and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("multidev: error: " + line.format(data=data, net=net)), lines
    assert not (tmp_path / "cmp" / "results.json").exists()


def test_compare_takes_the_engines_as_one_string_too(fake_installed):
    outcomes = multidev.compare("fake", [1], model="lenet", dataset="synthetic", epochs=1, truth=False)
    assert [o.spec.engine_name for o in outcomes] == ["fake"] and outcomes[0].error is None


def test_divergence_tells_rounding_from_another_definition(tmp_path, fake_installed):
    """A run with another learning rate leaves float32's reach at step 1; the same job again is rounding (on any
    CPU: the fake engine repeats itself bit for bit, where two float32 engines might part at a flipped ReLU)."""
    settings = dict(model="lenet", dataset="synthetic", epochs=1, batch_size=64)
    runs = [Settings("fake", 1, lr=lr, **settings) for lr in (0.1, 0.1, 0.12)]
    outcomes = multidev.compare(runs=runs, truth=True, out=tmp_path)
    truth, first, same, other = outcomes
    assert truth.spec.dtype == "float64" and first.verdict.startswith("rounding"), first.verdict
    assert same.verdict == first.verdict and same.divergence.max == first.divergence.max
    assert other.verdict.startswith("born at step 1 in ") and "(--float64 tells)" in other.verdict, other.verdict
    assert "| truth |" in (tmp_path / "results.md").read_text()


#: engines with a planted change, each a fake engine: another BatchNorm eps, or ReLUs flipped as rounding flips them
PLANTED = {"fake": "multidev.testing.fake:FakeEngine", "planted": "planted:definition", "flipped": "planted:flips"}


@pytest.mark.slow  # six runs, each a process of its own
def test_a_planted_definition_is_another_definition_and_planted_flips_are_rounding(tmp_path, monkeypatch):
    """compare --float64 on three fake engines: one builds BatchNorm with another eps (its float64 run leaves the
    truth at step 1), one flips the ReLU inputs nearest 0 in its first float32 gradient (born
    at step 1 too, but its float64 run is on the truth, so: rounding)."""
    import numpy as np

    from multidev import nn
    from multidev.data import arrays

    folder = tmp_path / "engines"
    folder.mkdir()
    (folder / "planted.py").write_text("from multidev.testing.fake import FakeEngine\n\n"
                                       "def definition():\n    return FakeEngine('bn-eps')\n\n"
                                       "def flips():\n    return FakeEngine('flip-relus')\n")
    monkeypatch.setenv("PYTHONPATH", registered(folder, PLANTED)["PYTHONPATH"])
    monkeypatch.syspath_prepend(str(folder.resolve()))
    rng = np.random.default_rng(0)
    y = np.arange(96) % 3
    x = (rng.normal(0, 1, (96, 1, 6, 6)) + y[:, None, None, None] * 0.5).astype(np.float32)
    net = nn.Sequential(nn.Conv2d(6, 3, padding=1), nn.BatchNorm(), nn.ReLU(), nn.GlobalAvgPool(), nn.Dense())
    outcomes = multidev.compare(["fake", "planted", "flipped"], [1], model=net, dataset=arrays(x, y), epochs=1,
                                batch_size=32, lr=0.1, float64=True, out=tmp_path / "cmp")
    verdicts = {o.spec.label: o.verdict for o in outcomes}
    assert [o.error for o in outcomes] == [None] * 6, outcomes
    assert verdicts["fake x1"] == "rounding", verdicts
    assert verdicts["planted x1 float64"].startswith("another definition: born at step 1 in "), verdicts
    assert verdicts["planted x1"].startswith("another definition: born at step 1 in "), verdicts
    assert verdicts["flipped x1 float64"].startswith("same definition"), verdicts
    assert verdicts["flipped x1"].startswith("rounding: born at step 1 in "), verdicts
    assert verdicts["flipped x1"].endswith("; float64 agrees")


def test_compare_from_python_returns_outcomes(fake_installed):
    outcomes = multidev.compare(runs=[Settings("fake", 1, model="lenet", dataset="synthetic", epochs=1)], truth=False)
    assert len(outcomes) == 1 and outcomes[0].error is None  # no float64 run asked for
    assert outcomes[0].result.test_total == 128 and outcomes[0].divergence is None


def test_compare_runs_each_engine_as_several_processes_when_asked():
    """`multidev compare --processes 2`: every run is one job of 2 workers, labelled so."""
    from multidev.cli.parser import parser

    args = parser().parse_args(["compare", "--backends", "torch", "--out", "o", "--processes", "2"])
    assert args.processes == 2
    spec = Settings("jax", 1, processes=2)
    assert spec.label == "jax 2p x1"
    argv = spec.replace(json="r.json").to_argv()
    assert argv[argv.index("--processes") + 1] == "2" and argv[argv.index("--devices") + 1] == "1"
    assert "--processes" not in Settings("jax", 2).to_argv()


def test_compare_from_python_with_a_definition_and_arrays_on_two_engines(tmp_path, monkeypatch):
    """The verdicts compare runs while the arrays saved for the runs are still there, and the report writes a
    definition object as data (both failed once after every run had trained)."""
    import numpy as np

    from multidev import nn
    from multidev.data import arrays

    engines = {"fake": "multidev.testing.fake:FakeEngine", "fake2": "multidev.testing.fake:FakeEngine"}
    monkeypatch.setenv("PYTHONPATH", registered(tmp_path / "engines", engines)["PYTHONPATH"])
    monkeypatch.syspath_prepend(str((tmp_path / "engines").resolve()))
    rng = np.random.default_rng(0)
    y = np.arange(64) % 2
    data = arrays((rng.normal(0, 1, (64, 4)) + y[:, None]).astype(np.float32), y)
    net = nn.Sequential(nn.Dense(8), nn.ReLU(), nn.Dense())
    outcomes = multidev.compare(["fake", "fake2"], [1], model=net, dataset=data, epochs=1, batch_size=16,
                                out=tmp_path / "cmp")
    assert [o.error for o in outcomes] == [None, None, None] and outcomes[2].verdict == "rounding"
    saved = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert json.loads(saved[1]["settings"]["model"])["format"] == "multidev-model/1"
