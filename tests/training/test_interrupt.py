"""Interruption loses nothing: signals stop at a step boundary, a second signal ends at once, a diverged loss stops.

The runs go through the ``multidev`` command in a child process, as a user runs them, on the fake engine
(registered for the child by entry point: ``multidev.testing.fake.registered``); one runs on torch, where
the contract promises a resumed run bit for bit.
"""

import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from multidev import load_checkpoint
from multidev.testing.fake import registered

#: 512 samples / 16 = 32 steps an epoch
TRAIN = ["train", "--devices", "2", "--model", "lenet", "--dataset", "synthetic", "--epochs", "2",
         "--batch-size", "16", "--lr", "0.05", "--no-progress"]

#: an engine that runs another and sends its own process the planned signals after the planned training steps
SIGNALLING = '''
import os

from multidev.testing.fake import FakeEngine

PLAN = {plan!r}  # training step (counted from 1 over the whole run) -> signals to send after it
STEPS = [0]


class Delegate:
    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Signalling(Delegate):
    def replicate(self, setup, state):
        return SignallingReplicas(self._inner.replicate(setup, state))


class SignallingReplicas(Delegate):
    def _after(self, stats):
        STEPS[0] += 1
        for signum in PLAN.get(STEPS[0], []):
            os.kill(os.getpid(), signum)
        return stats

    def train_step(self, batch, lr):
        return self._after(self._inner.train_step(batch, lr))

    def queue_step(self, batch, lr):
        return self._after(self._inner.queue_step(batch, lr))


def fake():
    return Signalling(FakeEngine())


def torch():
    from multidev_torch import TorchBackend

    return Signalling(TorchBackend())
'''


def multidev(args, tmp_path, signals_at=None):
    """``multidev ARGS`` in a child; ``--backend fake`` or ``signalling-torch`` sends itself ``signals_at``.

    ``signals_at``: {training step: [signal, ...]}. ``signalling-torch`` is the torch engine (its name
    stays ``torch``), registered apart from the installed one, which would win a tie of names.
    """
    folder = tmp_path / "engines"
    folder.mkdir(exist_ok=True)
    (folder / "signalling.py").write_text(SIGNALLING.format(plan=signals_at or {}))
    env = registered(folder, {"fake": "signalling:fake", "signalling-torch": "signalling:torch"})
    return subprocess.run([sys.executable, "-m", "multidev", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def final_state(path):
    _, state, meta = load_checkpoint(path)
    return state, meta


#: the core's augmentation and normalisation: the resumed run must draw the crops and flips it would have drawn
AUGMENTED = ["--augment", "crop,flip", "--normalize", "auto"]


@pytest.mark.parametrize("engine, signum, extra", [("fake", signal.SIGINT, []),
                                                   pytest.param("fake", signal.SIGTERM, [], marks=pytest.mark.slow),
                                                   # three torch runs; the augmented ones below resume a real
                                                   # engine too (CI's slow run on a Zen 4: 104 s with its lanes)
                                                   pytest.param("signalling-torch", signal.SIGINT, [],
                                                                marks=[pytest.mark.slow, pytest.mark.full]),
                                                   pytest.param("signalling-torch", signal.SIGINT, AUGMENTED,
                                                                marks=pytest.mark.slow)],
                         ids=["fake-SIGINT", "fake-SIGTERM", "torch-SIGINT", "torch-SIGINT-augmented"])
def test_signal_mid_epoch_saves_and_resume_equals_uninterrupted(tmp_path, engine, signum, extra):
    """Preemption as clusters do it: a signal, then the same command again (``--resume auto``)."""
    straight, stopped = tmp_path / "straight.npz", tmp_path / "stopped.npz"
    train = [*TRAIN, "--backend", engine, *extra]
    done = multidev([*train, "--checkpoint", str(straight)], tmp_path)
    assert done.returncode == 0, done.stderr
    again = [*train, "--checkpoint", str(stopped), "--resume", "auto"]  # no checkpoint yet: a fresh start
    # step 39 overall is epoch 2, step 7
    proc = multidev(again, tmp_path, {39: [int(signum)]})
    assert proc.returncode == 128 + signum, proc.stderr  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them
    assert proc.stderr.strip().splitlines() == [
        f"multidev: interrupted at epoch 2, step 7: checkpoint saved to {stopped}; the same command with --resume "
        f"{stopped} (or --resume auto) continues it"]
    _, meta = final_state(stopped)
    assert meta["epoch"] == 1 and meta["position"]["epoch"] == 2 and meta["position"]["step"] == 7
    resumed = multidev(again, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "epoch 1/2" not in resumed.stdout and "epoch 2/2" in resumed.stdout, resumed.stdout
    want, want_meta = final_state(straight)
    got, got_meta = final_state(stopped)
    assert got_meta["epoch"] == 2 and not got_meta.get("position")
    for name in want:  # bit for bit: the same steps on the same batches from the same weights
        assert np.array_equal(got[name], want[name]), f"{name} differs after resuming"
    assert got_meta["history"][1]["loss"] == want_meta["history"][1]["loss"]
    if engine != "fake":
        return  # the core's rule, checked once on the fake engine
    finished = multidev(again, tmp_path)  # a third time: nothing left to train, the saved result
    assert finished.returncode == 0 and "epoch 2/2" not in finished.stdout, finished.stdout + finished.stderr
    assert f"test acc: {want_meta['history'][1]['test_acc']:.2f}" in finished.stdout, finished.stdout


def test_second_signal_exits_at_once_and_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ck.npz"
    proc = multidev([*TRAIN, "--backend", "fake", "--checkpoint", str(path)], tmp_path,
                    {40: [int(signal.SIGINT), int(signal.SIGINT)]})
    assert proc.returncode == -signal.SIGINT, (proc.returncode, proc.stderr)
    _, meta = final_state(path)  # the end of epoch 1, whole
    assert meta["epoch"] == 1 and not meta.get("position")


def test_nan_loss_is_caught_at_its_step_and_the_checkpoint_stays_good(tmp_path):
    path = tmp_path / "ck.npz"
    args = [*TRAIN, "--backend", "fake", "--checkpoint", str(path)]
    first = multidev([*args, "--epochs", "1"], tmp_path)
    assert first.returncode == 0, first.stderr
    before = path.read_bytes()
    proc = multidev([*args, "--lr", "1e30", "--resume", str(path)], tmp_path)
    warning, *lines = proc.stderr.strip().splitlines()
    assert warning.startswith(f"multidev: warning: resuming {path} with other settings than its run: lr 1e+30 (it "
                              f"had 0.05)"), warning
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    # step 1's update at a rate of 1e30 leaves weights no loss is finite for: step 2's
    assert re.fullmatch(r"multidev: error: training diverged at epoch 2, step 2 \(the loss is (nan|inf)\): lower the "
                        r"learning rate; the checkpoint on disk, if any, is from before", lines[0]), lines
    assert path.read_bytes() == before
