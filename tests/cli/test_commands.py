import json
import subprocess
import sys

import pytest


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "multidev", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_train_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "out.json", tmp_path / "curve.png"
    proc = run("train", "--backend", "torch", "--devices", "2", "--model", "lenet", "--dataset", "synthetic",
               "--epochs", "2", "--batch-size", "32", "--json", str(out), "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("epoch 1/2: loss ") and lines[1].startswith("epoch 2/2: loss ")
    assert lines[-1].startswith("test acc: ") and lines[-1].endswith("sec/epoch on [cpu:0, cpu:1]")
    result = json.loads(out.read_text())
    assert result["backend"] == "torch" and result["devices"] == ["cpu:0", "cpu:1"]
    assert result["model"] == "lenet" and result["dataset"] == "synthetic"
    assert [e["epoch"] for e in result["epochs"]] == [1, 2]
    assert result["test_total"] == 128 and 0 <= result["test_acc"] <= 1
    assert result["test_acc"] > 0.5  # the synthetic classes are learnable in two epochs
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpus_fall_back_with_one_warning_line(tmp_path):
    proc = run("train", "--backend", "torch", "--gpus", "2", "--model", "lenet", "--dataset", "synthetic",
               "--epochs", "1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "multidev: warning: asked for 2 GPU(s) but 0 available: using 2 virtual CPU devices instead"]
    assert proc.stdout.strip().endswith("on [cpu:0, cpu:1]")


def test_backends_lists_engines_and_devices():
    proc = run("backends")
    assert proc.returncode == 0
    assert "torch: multidev-torch 0.1.0, torch 2." in proc.stdout and "GPU(s)" in proc.stdout


def test_resume_past_the_end_is_a_clear_error(tmp_path):
    ck = tmp_path / "c.npz"
    args = ["train", "--model", "lenet", "--dataset", "synthetic", "--no-progress", "--checkpoint", str(ck)]
    assert run(*args, "--epochs", "1").returncode == 0
    proc = run(*args, "--epochs", "1", "--resume", str(ck))
    assert proc.returncode == 2 and "raise --epochs" in proc.stderr


#: Mistakes the core catches before any engine runs: one line on stderr, exit code 2, no traceback.
BAD = {
    "zero devices": ["--devices", "0"],
    "negative devices": ["--devices", "-2"],
    "zero batch size": ["--batch-size", "0"],
    "negative learning rate": ["--lr", "-0.1"],
    "nan learning rate": ["--lr", "nan"],
    "unknown model": ["--model", "vgg"],
    "unknown data set": ["--dataset", "cifar"],
    "unwritable output": ["--json", "/nonexistent-folder/out.json"],
    "bad device name": ["--devices", "tpu:0"],
    "float64 on an engine without it": ["--dtype", "float64", "--backend", "mxnet", "--batchnorm", "sync",
                                        "--devices", "2"],
}


def assert_clear_error(proc, what):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, f"{what} exits {proc.returncode}, not 2; stderr: {proc.stderr[-300:]}"
    assert "Traceback" not in proc.stderr, f"{what} prints a traceback"
    assert len(lines) == 1 and lines[0].startswith("multidev: error: "), f"{what}: {lines}"


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_is_one_clear_line(what):
    assert_clear_error(run("train", "--epochs", "1", "--no-progress", *BAD[what]), what)


def test_corrupt_data_file(tmp_path):
    from multidev.data.fashion_mnist import FILES
    for name in FILES:
        (tmp_path / name).write_bytes(b"not an idx file")
    proc = run("train", "--dataset", "fashion-mnist", "--data-dir", str(tmp_path), "--no-progress")
    assert_clear_error(proc, "a corrupt data file")
    assert "MD5" in proc.stderr and str(tmp_path) in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--backend", "nope"], "unknown backend 'nope'"),
    (["--epochs", "0"], "epochs must be"),
    (["--plot", "/proc/forbidden/curve.png"], "not writable"),
    (["--resume", "/nonexistent/c.npz"], "does not exist"),
    (["--devices", "2", "--gpus", "2"], "not allowed with argument"),
])
def test_core_user_errors(args, message):
    proc = run("train", "--no-progress", *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
