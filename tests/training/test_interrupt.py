"""Interruption loses nothing: signals stop at a step boundary, kills leave whole files, bad files are one line."""

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from multidev import load_checkpoint

TRAIN = ["train", "--backend", "torch", "--devices", "2", "--model", "lenet", "--dataset", "synthetic",
         "--epochs", "2", "--batch-size", "16", "--lr", "0.05", "--no-progress"]


def run_with_signals(args, signals_at, tmp_path):
    """Run the command line in a child that sends itself ``signals_at`` = {(epoch, step): [signal, ...]}."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        from multidev_torch.parallel import TorchReplicas
        from multidev.cli import main
        plan = {signals_at!r}
        original, count = TorchReplicas.train_step, [0]
        def train_step(self, batch, lr):
            stats = original(self, batch, lr)
            count[0] += 1
            for signum in plan.get(count[0], []):
                os.kill(os.getpid(), signum)
            return stats
        TorchReplicas.train_step = train_step
        sys.exit(main({args!r}))
        """))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)


def final_state(path):
    _, state, meta = load_checkpoint(path)
    return state, meta


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_epoch_saves_and_resume_equals_uninterrupted(tmp_path, signum):
    straight, stopped = tmp_path / "straight.npz", tmp_path / "stopped.npz"
    done = subprocess.run([sys.executable, "-m", "multidev", *TRAIN, "--checkpoint", str(straight)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # 512 samples / 16 = 32 steps an epoch: step 39 overall is epoch 2, step 7.
    proc = run_with_signals(TRAIN + ["--checkpoint", str(stopped)], {39: [int(signum)]}, tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"multidev: interrupted at epoch 2, step 7: checkpoint saved to {stopped}; --resume {stopped} to continue"]
    _, meta = final_state(stopped)
    assert meta["epoch"] == 1 and meta["position"]["epoch"] == 2 and meta["position"]["step"] == 7
    resumed = subprocess.run([sys.executable, "-m", "multidev", *TRAIN, "--resume", str(stopped),
                              "--checkpoint", str(stopped)], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    want, want_meta = final_state(straight)
    got, got_meta = final_state(stopped)
    assert got_meta["epoch"] == 2 and not got_meta.get("position")
    for name in want:  # bit for bit: the same steps on the same batches from the same weights
        assert np.array_equal(got[name], want[name]), f"{name} differs after resuming"
    assert got_meta["history"][1]["loss"] == want_meta["history"][1]["loss"]


def test_second_signal_exits_at_once_and_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ck.npz"
    proc = run_with_signals(TRAIN + ["--checkpoint", str(path)], {40: [int(signal.SIGINT), int(signal.SIGINT)]},
                            tmp_path)
    assert proc.returncode == -signal.SIGINT, (proc.returncode, proc.stderr)
    _, meta = final_state(path)  # the end of epoch 1, whole
    assert meta["epoch"] == 1 and not meta.get("position")


def test_nan_loss_is_caught_at_its_step_and_the_checkpoint_stays_good(tmp_path):
    path = tmp_path / "ck.npz"
    args = [a for a in TRAIN]
    first = subprocess.run([sys.executable, "-m", "multidev", *args[:args.index("--epochs")], "--epochs", "1",
                            "--batch-size", "16", "--no-progress", "--checkpoint", str(path)],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    before = path.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "multidev", *TRAIN[:-3], "--lr", "1e30", "--no-progress",
                           "--resume", str(path), "--checkpoint", str(path)], capture_output=True, text=True,
                          timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("multidev: error: training diverged at epoch 2, step "), lines
    assert path.read_bytes() == before
