"""The recipe's core parts: settings checked in one line, the schedules' rates, flags that reach workers."""

import math
import subprocess
import sys
import threading

import numpy as np
import pytest

from multidev.errors import MultidevError
from multidev.outputs import checkpoint as ckpt
from multidev.rules.optimizers import STEP, Optimizer, update
from multidev.rules.schedules import Schedule
from multidev.settings.recipe import Recipe
from multidev.testing import LENET
from multidev.training.prefetch import ahead


@pytest.mark.parametrize("settings, message", [
    (dict(momentum=1.0), "momentum must be in [0, 1)"),
    (dict(momentum=-0.1), "momentum must be in [0, 1)"),
    (dict(weight_decay=-1e-4), "weight decay must be 0 or more"),
    (dict(name="adamw", betas=(0.9, 1.0)), "adamw betas must be two numbers in [0, 1)"),
    (dict(name="adamw", betas=(-0.1, 0.9)), "adamw betas must be two numbers in [0, 1)"),
    (dict(name="adamw", eps=0.0), "adamw eps must be above 0"),
    (dict(nesterov=True), "nesterov needs momentum above 0"),
    (dict(name="adam"), "unknown optimizer 'adam'"),
    (dict(momentum=float("nan")), "momentum must be a finite number"),
])
def test_bad_optimizer_settings_are_one_line(settings, message):
    with pytest.raises(MultidevError, match=message.replace("[", r"\[").replace(")", r"\)").replace("(", r"\(")):
        Optimizer(**settings)


def test_sgd_formula_by_hand():
    """Coupled decay, then momentum; Nesterov looks one buffer ahead."""
    opt = Optimizer(momentum=0.5, nesterov=True, weight_decay=0.1)
    w, g = {"a": np.array([2.0])}, {"a": np.array([1.0])}
    state = opt.init_state(LENET)
    state["optimizer.momentum.a"] = np.array([0.4])
    new, after = update(opt, w, g, state, lr=0.1)
    # g' = 1 + 0.1 * 2 = 1.2; b = 0.5 * 0.4 + 1.2 = 1.4; d = 1.2 + 0.5 * 1.4 = 1.9; w = 2 - 0.19
    assert after["optimizer.momentum.a"] == pytest.approx([1.4]) and new["a"] == pytest.approx([1.81])
    assert int(after[STEP]) == 1


def test_adamw_formula_by_hand():
    """Decoupled decay scaled by the rate; epsilon outside the bias-corrected root."""
    opt = Optimizer("adamw", betas=(0.5, 0.75), eps=0.1, weight_decay=0.2)
    state = {STEP: np.array(0), "optimizer.m.a": np.zeros(1), "optimizer.v.a": np.zeros(1)}
    new, after = update(opt, {"a": np.array([1.0])}, {"a": np.array([2.0])}, state, lr=0.5)
    # m = 1, v = 1; m_hat = 2, v_hat = 4; step = 2 / (2 + 0.1); w = 1 - 0.5 * (2 / 2.1 + 0.2 * 1)
    assert new["a"] == pytest.approx([1 - 0.5 * (2 / 2.1 + 0.2)])
    assert after["optimizer.m.a"] == pytest.approx([1.0]) and after["optimizer.v.a"] == pytest.approx([1.0])


def test_state_names_are_canonical():
    names = Optimizer("adamw").state_names(LENET)
    assert names[0] == STEP and len(names) == 1 + 2 * len(LENET.trainable())
    assert f"optimizer.m.{LENET.trainable()[0]}" in names
    assert Optimizer().state_names(LENET) == [STEP]  # plain SGD keeps nothing but the count


def test_schedules():
    steps, epochs = 10, 3
    constant = Schedule().rates(0.1, steps, epochs)
    assert constant == [0.1] * 30
    step = Schedule("step", milestones=(1, 2), factor=0.5).rates(0.2, steps, epochs)
    assert step[:10] == [0.2] * 10 and step[10:20] == [0.1] * 10 and step[20:] == [0.05] * 10
    cosine = Schedule("cosine", warmup_steps=5).rates(1.0, steps, epochs)
    assert cosine[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert cosine[5] == 1.0 and all(a > b for a, b in zip(cosine[5:], cosine[6:])) and 0 < cosine[-1] < 0.01
    assert cosine[5 + 12] == pytest.approx(0.5 * (1 + math.cos(math.pi * 12 / 25)))
    assert Schedule(warmup_epochs=0.5).warmup(10) == 5


@pytest.mark.parametrize("settings, message", [
    (dict(kind="step"), "--schedule step needs --milestones"),
    (dict(kind="cosine", milestones=(3,)), "milestones belong to --schedule step"),
    (dict(kind="linear"), "unknown schedule 'linear'"),
    (dict(warmup_steps=-1), "warm-up steps must be a whole number of 0 or more"),
    (dict(warmup_steps=2, warmup_epochs=1.0), "not both"),
    (dict(kind="step", milestones=(2,), factor=0.0), "factor must be in"),
])
def test_bad_schedules_are_one_line(settings, message):
    with pytest.raises(MultidevError, match=message):
        Schedule(**settings)


def test_warmup_longer_than_the_run_is_refused():
    with pytest.raises(MultidevError, match=r"the warm-up \(30 steps\) is as long as the run or longer"):
        Schedule(warmup_epochs=3).check(steps_per_epoch=10, epochs=3)
    Schedule(warmup_epochs=2.9).check(steps_per_epoch=10, epochs=3)


def test_recipe_round_trips_through_flags_and_settings():
    from multidev import Settings
    from multidev.cli.parser import parser
    from multidev.settings.run import from_args

    runs = [Settings(), Settings(momentum=0.9, nesterov=True, weight_decay=5e-4, schedule="step", milestones="5,8",
                                 factor=0.2, warmup_epochs=0.5, accumulate=3, precision="bf16", tf32=True),
            Settings(optimizer="adamw", betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05, schedule="cosine",
                     warmup_steps=7)]
    for run in runs:
        assert from_args(parser().parse_args(run.to_argv())).recipe == run.recipe
        assert Recipe.from_settings(run.recipe.settings()) == run.recipe
    assert runs[1].recipe != runs[0].recipe != runs[2].recipe


@pytest.mark.parametrize("argv, message", [
    (["--momentum", "1.5"], "momentum must be in [0, 1), got 1.5"),
    (["--weight-decay", "-1"], "weight decay must be 0 or more"),
    (["--optimizer", "adamw", "--betas", "0.9,1.0"], "adamw betas must be two numbers in [0, 1)"),
    (["--betas", "0.9"], "--betas takes two numbers"),
    (["--accumulate", "0"], "accumulate must be a whole number of micro-batches of at least 1, got 0"),
    (["--warmup-epochs", "20", "--epochs", "2"], "the warm-up (240 steps) is as long as the run or longer"),
    (["--precision", "bf16", "--dtype", "float64"], "precision bf16 keeps float32 master weights"),
])
def test_bad_recipe_flags_are_one_line(argv, message):
    proc = subprocess.run([sys.executable, "-m", "multidev", "train", "--no-progress", *argv],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"multidev: error: {message}"] or \
        message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_an_engine_without_bf16_is_refused_in_one_line():
    from multidev.testing.fake import FakeEngine
    from multidev.training.api import train

    with pytest.raises(MultidevError, match="the fake engine does not offer bf16: use --precision fp32"):
        train(FakeEngine(), precision="bf16", epochs=1)


def test_checkpoint_keeps_optimizer_state(tmp_path):
    opt = Optimizer(momentum=0.9)
    state = opt.init_state(LENET, np.float32)
    state[STEP] = np.array(7, np.int64)
    path = ckpt.save(tmp_path / "c.npz", LENET, LENET.init(0), optimizer_state=state, epoch=1, seed=0,
                     recipe=Recipe(opt).settings())
    spec, params, meta = ckpt.load(path)
    assert spec == LENET and set(params) == {p.name for p in LENET.params()}
    got = ckpt.load_optimizer_state(path)
    assert sorted(got) == sorted(state) and int(got[STEP]) == 7
    assert Recipe.from_settings(meta["recipe"]).optimizer == opt


def test_resume_with_another_optimizer_is_refused(tmp_path):
    from multidev.data import synthetic
    from multidev.testing.fake import FakeEngine
    from multidev.training.api import train

    data = synthetic(n_train=16, n_test=4, shape=LENET.in_shape)
    kwargs = dict(model="lenet", dataset=data, batch_size=8)
    train(FakeEngine(), epochs=1, checkpoint=tmp_path / "c.npz", momentum=0.9, **kwargs)
    with pytest.raises(MultidevError, match="was trained with sgd m0.9, this run asks for adamw"):
        train(FakeEngine(), epochs=2, resume=tmp_path / "c.npz", optimizer="adamw", **kwargs)


def test_prefetch_keeps_order_runs_ahead_and_raises_in_the_loop():
    seen = []

    def prepare(i):
        seen.append((i, threading.current_thread().name))
        if i == 5:
            raise ValueError("bad batch 5")
        return i * 10

    got = []
    with pytest.raises(ValueError, match="bad batch 5"):
        for value in ahead(prepare, range(8)):
            got.append(value)
    assert got == [0, 10, 20, 30, 40]
    assert all(name.startswith("multidev-prefetch") for _, name in seen)
    assert list(ahead(lambda i: i + 1, range(4), depth=0)) == [1, 2, 3, 4]


def test_a_job_with_a_warmup_longer_than_the_run_is_refused_before_any_worker_starts():
    proc = subprocess.run([sys.executable, "-m", "multidev", "train", "--processes", "2", "--warmup-epochs", "3",
                           "--epochs", "2", "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "multidev: error: the warm-up (3 epochs) is as long as the run or longer (2 epochs): shorten the warm-up or "
        "raise --epochs"], proc.stderr
