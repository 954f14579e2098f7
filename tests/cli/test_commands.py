"""The commands as a user runs them: output, files, and every mistake refused in one line."""

import json
import re
import subprocess
import sys

import pytest

from multidev.testing.fake import registered


def run(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "multidev", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def run_here(capsys, *args) -> subprocess.CompletedProcess:
    """The command's ``main`` in this process, for mistakes refused before any work: what ``run`` gives, without
    a new interpreter's 2-4 s of imports (``python -m multidev`` adds only the processes' set-up and the last
    resort for tracebacks, which the subprocess cases keep checking)."""
    from multidev.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own exits
        code = exc.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


@pytest.fixture
def fake(tmp_path) -> dict[str, str]:
    """An environment where ``--backend fake`` is the fake engine: the core's part, without a framework's."""
    return registered(tmp_path / "engines")


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


def test_gpus_fall_back_with_one_warning_line(fake):
    """The fake engine sees no GPU on any machine."""
    proc = run("train", "--backend", "fake", "--gpus", "2", "--model", "lenet", "--dataset", "synthetic",
               "--epochs", "1", "--no-progress", env=fake)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "multidev: warning: asked for 2 GPU(s) but 0 available: using 2 virtual CPU devices instead"]
    assert proc.stdout.strip().endswith("on [cpu:0, cpu:1]")


@pytest.mark.slow
def test_backends_lists_engines_and_devices():
    proc = run("backends")
    assert proc.returncode == 0
    assert "torch: multidev-torch 0.1.0, torch 2." in proc.stdout and "GPU(s)" in proc.stdout


@pytest.mark.parametrize("command", [["backends"], ["train", "--backend", "fake", "--model", "lenet", "--dataset",
                                                   "synthetic", "--epochs", "2", "--no-progress"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(fake, command):
    """`multidev ... | head -1`: the pipe closes before the command has written; no traceback, the shell's 141."""
    proc = subprocess.Popen([sys.executable, "-m", "multidev", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=fake)
    proc.stdout.close()
    err = proc.stderr.read()
    assert (proc.wait(timeout=300), err) == (141, "")


def test_resume_past_the_end_is_a_clear_error(tmp_path, fake):
    ck = tmp_path / "c.npz"
    args = ["train", "--backend", "fake", "--model", "lenet", "--dataset", "synthetic", "--no-progress",
            "--checkpoint", str(ck)]
    assert run(*args, "--epochs", "1", env=fake).returncode == 0
    proc = run(*args, "--epochs", "1", "--resume", str(ck), env=fake)
    assert_clear_error(proc, "a resume past the end", f"nothing to train: {ck} is already at epoch 1; raise --epochs")


#: Mistakes the core catches before any engine runs: exit code 2, no traceback, and on stderr this one line
#: after "multidev: error: " (a str: the whole line; a pattern: the line in full, where it names what is installed)
BAD = {
    "zero devices": (["--devices", "0"], "devices must be at least 1, got 0: ask for one device or more"),
    "negative devices": (["--devices", "-2"], "devices must be at least 1, got -2: ask for one device or more"),
    "zero batch size": (["--batch-size", "0"], "batch size must be a whole number of at least 1, got 0"),
    "zero epochs": (["--epochs", "0"], "epochs must be a whole number of at least 1, got 0"),
    "negative learning rate": (["--lr", "-0.1"], "learning rate must be a positive finite number, got -0.1"),
    "nan learning rate": (["--lr", "nan"], "learning rate must be a positive finite number, got nan"),
    "unknown model": (["--model", "vgg"], "unknown model 'vgg': give resnet18, lenet, mlp, convnet, "
                                          "mobilenet_v2, vit, path/net.py:function, net.onnx or net.json"),
    "missing model file": (["--model", "nowhere/net.py:build"], "model file nowhere/net.py does not exist: give "
                           "resnet18, lenet, mlp, convnet, mobilenet_v2, vit, path/net.py:function, net.onnx or "
                           "net.json"),
    "unknown data set": (["--dataset", "cifar"], "unknown data set 'cifar' (nor a folder or file here): give digits, "
                                                 "fashion-mnist, cifar-10, synthetic, a .npz file, a folder (README: "
                                                 "Your data), or (in Python) multidev.data.arrays(...)"),
    "missing data folder": (["--dataset", "nowhere/photos/"], "data folder nowhere/photos/ does not exist"),
    "missing data file": (["--dataset", "nowhere/set.npz"], "data file nowhere/set.npz does not exist"),
    "unknown engine": (["--backend", "nope"], re.compile(r"unknown backend 'nope': choose one of [a-z, ]*torch.*")),
    "unwritable output": (["--json", "/nonexistent-folder/out.json"],
                          "--json /nonexistent-folder/out.json: folder /nonexistent-folder does not exist or is not "
                          "writable"),
    "unwritable plot": (["--plot", "/proc/forbidden/curve.png"],
                        "--plot /proc/forbidden/curve.png: folder /proc/forbidden does not exist or is not writable"),
    "missing checkpoint": (["--resume", "/nonexistent/c.npz"],
                           "checkpoint /nonexistent/c.npz does not exist: check its path"),
    "negative seed": (["--seed", "-1"], "seed must be a whole number of 0 or more, got -1"),
    "a misspelled flag": (["--lrr", "0.1"], "unrecognized arguments: --lrr 0.1 (see `multidev train --help`)"),
    "a model file without its function": (["--model", "conftest.py"], "--model conftest.py: name the function that "
                                           "returns the model after a colon, e.g. conftest.py:build"),
    "a layout for a named data set": (["--layout", "NHWC"], "--layout is for your arrays (a .npz file, a folder of "
                                      ".npy files, a saved Hugging Face set); digits is read in its own layout: leave "
                                      "--layout out"),
    "devices and gpus": (["--devices", "2", "--gpus", "2"],
                         "argument --gpus: not allowed with argument --devices (see `multidev train --help`)"),
    "bad device name": (["--devices", "tpu:0"], "bad device name 'tpu:0': write kind:index, e.g. cpu:0 or gpu:1"),
    "float64 on an engine without it": (["--dtype", "float64", "--backend", "mxnet", "--batchnorm", "sync",
                                         "--devices", "2"],
                                        "the mxnet engine runs float64 with local BatchNorm or on one device only: "
                                        "use --batchnorm local, or float32"),
}


def assert_clear_error(proc, what, line):
    """Exit code 2, no traceback, and stderr exactly one line: ``line`` (a str, or a pattern it matches in full)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, f"{what} exits {proc.returncode}, not 2; stderr: {proc.stderr[-300:]}"
    assert "Traceback" not in proc.stderr, f"{what} prints a traceback"
    assert len(lines) == 1 and lines[0].startswith("multidev: error: "), f"{what}: {lines}"
    got = lines[0].removeprefix("multidev: error: ")
    if isinstance(line, re.Pattern):
        assert line.fullmatch(got), f"{what}: {got!r} does not match {line.pattern!r}"
    else:
        assert got == line, f"{what}: {got!r}"


#: the mistakes checked through ``python -m multidev`` itself; the rest go through ``main`` in the test's process
THROUGH_THE_COMMAND = {"a misspelled flag", "devices and gpus", "float64 on an engine without it"}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_is_one_clear_line(what, capsys):
    argv, line = BAD[what]
    argv = ["train", "--epochs", "1", "--no-progress", *argv]
    assert_clear_error(run(*argv) if what in THROUGH_THE_COMMAND else run_here(capsys, *argv), what, line)


def _files(folder):
    """A user's folder: a data set, a checkpoint of another run, a foreign .npz, and a model with a typo."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(folder / "d.npz", x_train=rng.random((16, 4), np.float32), y_train=np.arange(16) % 2)
    np.savez(folder / "one.npz", x_train=rng.random((16, 4), np.float32), y_train=np.zeros(16, np.int64))
    np.savez(folder / "mine.npz", weights=np.ones(3))
    np.save(folder / "x_train.npy", np.zeros((4, 4), np.float32))
    (folder / "cut.npz").write_bytes((folder / "d.npz").read_bytes()[:200])
    (folder / "net.py").write_text("from multidev import nn\ndef build()\n    return nn.Sequential(nn.Dense())\n")
    (folder / "notes.txt").write_text("mine")
    for c in "ab":
        (folder / "pics" / c).mkdir(parents=True)
        for i in range(3):
            np.save(folder / "pics" / c / f"{i}.npy", np.zeros(1))  # stand-ins: the check reads no pixel
            (folder / "pics" / c / f"{i}.npy").rename(folder / "pics" / c / f"{i}.png")


#: A mistake about files: (flags, the one line); every file in the folder is as it was after it
FILES = {
    "an output over the data": (["--dataset", "d.npz", "--checkpoint", "d.npz"],
                                "--checkpoint d.npz is also --dataset's file: writing it would replace it; give "
                                "another file name"),
    "two outputs on one file": (["--checkpoint", "c.npz", "--json", "c.npz"],
                                "--json c.npz is also --checkpoint's file: give each output a file of its own"),
    "a checkpoint over a foreign file": (["--checkpoint", "mine.npz"],
                                         "--checkpoint mine.npz exists and is not a multidev checkpoint: give "
                                         "another file name, or move that file away"),
    "a trace folder that is a file": (["--trace", "notes.txt"], "--trace notes.txt is a file: give a folder"),
    "a plot over an image of the data": (["--dataset", "pics", "--plot", "pics/a/0.png"],
                                         "--plot pics/a/0.png lies inside --dataset's folder pics: writing there "
                                         "changes your data; give a path outside it"),
    "a JSON over a file of another kind": (["--json", "notes.txt"], "--json notes.txt exists and is no .json file: "
                                           "give a file name ending in .json, or move that file away"),
    "a data file for its folder": (["--dataset", "x_train.npy"], "data x_train.npy is a file: give a .npz file, "
                                   "or the folder that holds it (README: Your data)"),
    "a cut .npz": (["--dataset", "cut.npz"], re.compile(r"cut\.npz is not a readable \.npz file \(.+\): write it "
                                                        r"again with numpy\.savez")),
    "one class": (["--dataset", "one.npz"], "one has one class: a classifier learns to tell two or more apart; "
                                            "give samples of another class"),
}


@pytest.mark.parametrize("what", sorted(FILES))
def test_a_mistake_about_files_is_one_line_and_loses_nothing(tmp_path, fake, what):
    argv, line = FILES[what]
    _files(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = [*argv, "--dataset", "d.npz"] if "--dataset" not in argv else argv
    proc = subprocess.run([sys.executable, "-m", "multidev", "train", "--backend", "fake", "--model", "mlp",
                           "--epochs", "1", "--no-progress", *argv], capture_output=True, text=True, timeout=600,
                          env=fake, cwd=tmp_path)
    assert_clear_error(proc, what, line)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_an_error_in_the_users_model_file_is_one_line_naming_it(tmp_path, fake):
    """The user's code failed, not a check of multidev's: Python's exit code 1, the file, the line and the error."""
    _files(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "multidev", "train", "--backend", "fake", "--model", "net.py:build",
                           "--dataset", "d.npz", "--epochs", "1", "--no-progress"], capture_output=True, text=True,
                          timeout=600, env=fake, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == ["multidev: error: net.py line 2: SyntaxError: expected ':'"]


def test_corrupt_data_file(tmp_path):
    """The first file checked is named with its folder, and with the checksum it should have."""
    from multidev.data.fashion_mnist import FILES
    for name in FILES:
        (tmp_path / name).write_bytes(b"not an idx file")
    proc = run("train", "--dataset", "fashion-mnist", "--data-dir", str(tmp_path), "--no-progress")
    first = next(iter(FILES))
    assert_clear_error(proc, "a corrupt data file", re.compile(
        rf"{re.escape(str(tmp_path / first))} fails its MD5 check \(got [0-9a-f]{{32}}, published {FILES[first]}\): "
        rf"delete it and run again, or put the official file there"))


@pytest.mark.parametrize("argv, line", [
    (["--momentum", "1.5"], "momentum must be in [0, 1), got 1.5"),
    (["--weight-decay", "-1"], "weight decay must be 0 or more, got -1.0"),
    (["--optimizer", "adamw", "--betas", "0.9,1.0"], "adamw betas must be two numbers in [0, 1), got (0.9, 1.0)"),
    (["--betas", "0.9"], "--betas takes two numbers separated by a comma, e.g. 0.9,0.999; got '0.9'"),
    (["--accumulate", "0"], "accumulate must be a whole number of micro-batches of at least 1, got 0"),
    (["--warmup-epochs", "20", "--epochs", "2"], "the warm-up (240 steps) is as long as the run or longer (24 steps "
                                                 "of 2 epochs): shorten the warm-up or raise --epochs"),
    (["--precision", "bf16", "--dtype", "float64"], "precision bf16 keeps float32 master weights: leave dtype at "
                                                    "float32, not float64"),
])
def test_bad_recipe_flags_are_one_line(argv, line, capsys):
    assert_clear_error(run_here(capsys, "train", "--no-progress", *argv), " ".join(argv), line)


def test_a_job_with_a_warmup_longer_than_the_run_is_refused_before_any_worker_starts():
    proc = run("train", "--processes", "2", "--warmup-epochs", "3", "--epochs", "2", "--no-progress")
    assert_clear_error(proc, "a job with a warm-up longer than the run", "the warm-up (3 epochs) is as long as the "
                       "run or longer (2 epochs): shorten the warm-up or raise --epochs")
