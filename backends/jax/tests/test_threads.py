"""XLA's threads per step: what the environment pins, and the measured choice (once per step, kept, run untouched)."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("jax")

import multidev  # noqa: E402
from multidev.engine import State  # noqa: E402
from multidev.testing import LENET, assert_states_equal, batch  # noqa: E402


@pytest.mark.parametrize("omp, flags, env, want", [
    ("1", "", "", {"xla_cpu_multi_thread_eigen": False}),      # --threads 1, or a job's worker on its core
    ("1", "", "cores", {"xla_cpu_multi_thread_eigen": False}),  # one thread is a limit, not a preference
    ("1", "--xla_cpu_multi_thread_eigen=true", "", {}),          # the user's flag stands
    ("2", "--xla_dump_to=x", "one", {"xla_cpu_multi_thread_eigen": False}),
    ("2", "", "cores", {}),
])
def test_the_environment_pins_a_form_without_changing_itself(monkeypatch, omp, flags, env, want):
    from multidev_jax import threads

    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.setenv("XLA_FLAGS", flags)
    monkeypatch.setenv(threads.ENV, env)
    environment = dict(os.environ)
    assert threads.options(threads.pinned()) == want
    assert dict(os.environ) == environment  # per compiled step: no process-wide variable


@pytest.fixture
def measuring(monkeypatch, tmp_path):
    """The threads module measuring afresh, its choices in a folder of this test's own, no step compiled yet."""
    from multidev_jax import choices, compiled, threads

    multidev.load_backend("jax").max_cpu_devices()
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(choices.compile_cache, "folder", lambda: tmp_path)
    monkeypatch.setattr(threads, "_kept", choices.Kept("threads.json", threads.FORMS))
    monkeypatch.setattr(threads, "_measured", [])
    monkeypatch.setattr(compiled, "_CACHE", {})
    return threads


def _train(devices: int, steps: int = 2) -> State:
    engine = multidev.load_backend("jax")
    reps = multidev.replicate(engine, multidev.Setup(LENET, multidev.resolve_devices(devices=devices, max_cpu=8)),
                              LENET.init(0))
    for step in range(steps):
        x, y = batch(LENET, 12, seed=step)
        reps.train_step(reps.place(multidev.cut(x, y, multidev.shard_sizes(12, devices))), 0.1)
    return reps.state()


def test_a_step_on_two_devices_is_measured_once_kept_and_trains_as_the_chosen_form_alone(measuring, monkeypatch,
                                                                                          tmp_path):
    from multidev_jax import compiled

    measured = _train(2)
    saved = json.loads((tmp_path / "threads.json").read_text())
    train = [k for k in saved if k.startswith("train:2:")]
    assert len(train) == 1 and measuring._measured == [train[0]] and set(saved.values()) <= set(measuring.FORMS)
    chosen = saved[train[0]]
    assert f"{chosen} for 1" in measuring.note() or (chosen == "cores" and "per operation for 1" in measuring.note())
    # the timed runs used copies: the run equals one that only ever ran the chosen form
    monkeypatch.setenv(measuring.ENV, chosen)
    monkeypatch.setattr(compiled, "_CACHE", {})
    assert_states_equal([measured, _train(2)], promise="measuring XLA's threads leaves the run as it was")
    # a later run reads the file instead of measuring: make the saved choice the other form to see it is read
    monkeypatch.delenv(measuring.ENV)
    monkeypatch.setattr(compiled, "_CACHE", {})
    other = next(f for f in measuring.FORMS if f != chosen)
    (tmp_path / "threads.json").write_text(json.dumps({train[0]: other}))
    measuring._kept.forget()
    monkeypatch.setattr(measuring, "_seconds", None)  # measuring again would fail
    forms = []
    real = measuring.options
    monkeypatch.setattr(measuring, "options", lambda form: forms.append(form) or real(form))
    _train(2, steps=1)
    assert forms == [other]


def test_one_device_measures_nothing(measuring, monkeypatch, tmp_path):
    monkeypatch.setattr(measuring, "_seconds", None)
    state = _train(1, steps=1)
    assert all(np.isfinite(v).all() for v in state.values())
    assert measuring._measured == [] and not (tmp_path / "threads.json").exists()


def test_a_long_step_is_timed_fewer_times():
    import time

    from multidev_jax import threads

    calls = []

    def step() -> None:
        calls.append(1)
        time.sleep(0.03)

    assert threads._seconds(step, (), repeats=3, budget=10.0) >= 0.03 and len(calls) == 4  # one untimed, 3 timed
    calls.clear()
    threads._seconds(step, (), repeats=3, budget=0.05)
    assert len(calls) == 2  # the untimed run and one timed: together over the budget
