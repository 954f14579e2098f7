"""Steps kept whole on disk: a later run loads them untraced, with the same answers, and only where they still hold."""

import json
import pickle

import numpy as np
import pytest

pytest.importorskip("jax")

import multidev  # noqa: E402
from multidev.engine import ModelSpec, Optimizer  # noqa: E402
from multidev.testing import assert_states_equal, batch  # noqa: E402


def spec(width: int) -> ModelSpec:
    """A model of a shape no other test compiles (each test its own): XLA compiles its steps here, JAX's cache
    (shared by the suite's processes) never hands them back."""
    return ModelSpec("mlp", (1, 3, width), 7)


@pytest.fixture
def kept(monkeypatch, tmp_path):
    """The store switched on in a folder of this test's own, nothing compiled in this process; counts what it
    loaded, what it kept and what was traced."""
    from multidev_jax import compiled, kept_steps

    monkeypatch.delenv(kept_steps.ENV, raising=False)
    monkeypatch.setattr(kept_steps.compile_cache, "folder", lambda: tmp_path)  # the kept forms' files too
    monkeypatch.setattr(compiled, "_CACHE", {})
    counts = {"loaded": 0, "kept": 0, "traced": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            out = real(*args, **kwargs)
            counts[name] += out is not None if name == "loaded" else 1
            return out
        monkeypatch.setattr(kept_steps if name != "traced" else compiled.Compiler, real.__name__, wrapper)
    counting("loaded", kept_steps.load)
    counting("kept", kept_steps.save)
    counting("traced", compiled.Compiler._compile)
    return counts


def _run(spec: ModelSpec, momentum: float = 0.9, new_process: bool = True):
    import jax

    from multidev_jax import compiled

    compiled._CACHE.clear()  # as a new replica set: no step compiled yet
    if new_process:  # and JAX's programs gone too
        jax.clear_caches()
    engine = multidev.load_backend("jax")
    devices = multidev.resolve_devices(devices=2, max_cpu=8)
    setup = multidev.Setup(spec, devices, optimizer=Optimizer("sgd", momentum=momentum))
    reps = multidev.replicate(engine, setup, spec.init(0))
    for step in range(2):
        x, y = batch(spec, 10, seed=step)
        reps.train_step(reps.place(multidev.cut(x, y, multidev.shard_sizes(10, 2))), 0.1)
    x, y = batch(spec, 10, seed=9)
    return reps.state(), reps.evaluate(reps.place(multidev.cut(x, y, multidev.shard_sizes(10, 2)))).loss_sum


def test_a_later_run_loads_its_steps_untraced_with_the_same_answers(kept, tmp_path):
    first, first_loss = _run(spec(11))
    assert kept == {"loaded": 0, "kept": 2, "traced": 2}, kept  # the train and evaluation steps
    assert len(list(tmp_path.glob("steps/*.pkl"))) == 2
    second, second_loss = _run(spec(11))
    assert kept == {"loaded": 2, "kept": 2, "traced": 2}, kept  # nothing traced again
    assert_states_equal([first, second], promise="a kept step computes what the traced one did")
    assert second_loss == first_loss


def test_another_optimizer_is_another_step(kept):
    _run(spec(12), momentum=0.9)
    _run(spec(12), momentum=0.5)  # the same shapes: only the key tells the train steps apart
    assert kept["loaded"] == 0 and kept["traced"] == 4, kept


def test_a_step_whose_measured_form_would_now_be_another_is_traced_again(kept, tmp_path):
    from multidev_jax.forms import THREADS

    _run(spec(13))
    # a form decided while the step was traced (as the BatchNorm sums or XLA's threads are, where measured)
    held = [form for form in THREADS.forms if THREADS.still("a program", (), form)]
    other = next(form for form in THREADS.forms if form not in held)
    for path in tmp_path.glob("steps/*.pkl"):
        saved = pickle.loads(path.read_bytes())
        saved["decisions"] = [("threads", "a program", (), other)]
        path.write_bytes(pickle.dumps(saved))
    _run(spec(13))
    assert kept["loaded"] == 0 and kept["traced"] == 4, kept
    if held:  # the same decision, written as it holds, is loaded
        for path in tmp_path.glob("steps/*.pkl"):
            saved = pickle.loads(path.read_bytes())
            saved["decisions"] = [("threads", "a program", (), held[0])]
            path.write_bytes(pickle.dumps(saved))
        _run(spec(13))
        assert kept["loaded"] == 2, kept


def test_a_step_jaxs_cache_holds_is_compiled_again_to_be_kept_and_the_store_can_be_switched_off(kept, tmp_path,
                                                                                                  monkeypatch):
    from multidev_jax import compile_cache, kept_steps

    monkeypatch.setenv(kept_steps.ENV, "off")
    _run(spec(14))  # compiled by XLA and written to JAX's cache, but not kept: the store is off
    assert kept == {"loaded": 0, "kept": 0, "traced": 2} and not list(tmp_path.glob("steps/*.pkl")), kept
    monkeypatch.delenv(kept_steps.ENV)
    # as the first run after a change of multidev's source: JAX's cache holds the steps, which it would hand back
    # unkeepable; XLA compiles them again instead, and they are kept
    _run(spec(14))
    assert kept == {"loaded": 0, "kept": 2, "traced": 4} and len(list(tmp_path.glob("steps/*.pkl"))) == 2, kept
    hits = compile_cache.hits()
    trained, _ = _run(spec(14))
    assert kept["loaded"] == 2 and kept["traced"] == 4 and np.isfinite(trained["fc1.weight"]).all(), kept
    others = compile_cache.hits() - hits  # the run's programs besides its steps
    monkeypatch.setenv(kept_steps.ENV, "off")
    hits = compile_cache.hits()
    _run(spec(14))  # JAX's cache is used again after each bypass: it hands the two steps back too
    assert compile_cache.hits() - hits == others + 2, (compile_cache.hits() - hits, others)


def test_multidev_backends_says_where_steps_are_kept_or_why_not(monkeypatch, tmp_path):
    from multidev_jax import kept_steps

    monkeypatch.setattr(kept_steps.compile_cache, "folder", lambda: tmp_path)
    monkeypatch.delenv(kept_steps.ENV, raising=False)
    assert str(tmp_path / "steps") in kept_steps.note()
    monkeypatch.setenv(kept_steps.ENV, "off")
    assert kept_steps.note().startswith(f"off ({kept_steps.ENV}=off)")
    assert kept_steps.path("train", ()) is None
    monkeypatch.delenv(kept_steps.ENV)
    monkeypatch.setattr(kept_steps.compile_cache, "folder", lambda: None)
    assert kept_steps.note().startswith("off with the compilation cache")
    assert multidev.load_backend("jax").settings()["kept steps"] == kept_steps.note()


def test_the_least_recently_used_steps_go_when_the_folder_is_over_its_budget(tmp_path):
    import os

    from multidev_jax import kept_steps

    for i, name in enumerate("abcd"):  # a oldest ... d newest, 100 bytes each
        (tmp_path / f"{name}.pkl").write_bytes(bytes(100))
        os.utime(tmp_path / f"{name}.pkl", (1000 + i, 1000 + i))
    os.utime(tmp_path / "a.pkl", (2000, 2000))  # a loaded since: used most recently
    (tmp_path / "other.json").write_bytes(bytes(500))  # not a kept step: never counted nor removed
    kept_steps.prune(tmp_path, 250)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pkl", "d.pkl", "other.json"]
    kept_steps.prune(tmp_path, 250)  # within its budget: nothing goes
    assert len(list(tmp_path.glob("*.pkl"))) == 2


def test_a_run_prunes_what_it_did_not_use_and_keeps_what_it_loaded(kept, tmp_path, monkeypatch):
    import time

    from multidev_jax import kept_steps

    def files():
        return set(tmp_path.glob("steps/*.pkl"))
    _run(spec(15))
    loaded_again = files()
    time.sleep(0.05)
    _run(spec(16))
    unused = files() - loaded_again
    time.sleep(0.05)
    _run(spec(15))  # loads its two steps: now the most recently used of the four
    assert kept["loaded"] == 2, kept
    sizes = [p.stat().st_size for p in files()]
    monkeypatch.setattr(kept_steps, "BUDGET", sum(sizes) + min(sizes) // 2)  # room for these four, not six
    time.sleep(0.05)
    _run(spec(17))  # two more kept: the two used least recently go
    new = files() - loaded_again - unused
    assert len(new) == 2 and files() == loaded_again | new, "spec 16's steps, unused since, should have gone"


@pytest.mark.slow
def test_steps_are_kept_in_a_folder_the_user_gave_jax(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIDEV_")}
    env.update(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax"), XDG_CACHE_HOME=str(tmp_path / "home"))
    command = [sys.executable, "-m", "multidev", "train", "--backend", "jax", "--model", "mlp", "--epochs", "1",
               "--devices", "2", "--no-progress", "--json", str(tmp_path / "result.json")]
    cached = []
    for _ in range(2):
        subprocess.run(command, env=env, check=True, capture_output=True)
        cached.append(json.loads((tmp_path / "result.json").read_text())["compile_cached"])
    assert len(list((tmp_path / "jax" / "steps").glob("*.pkl"))) == 2
    assert cached[1] >= 2 > cached[0], cached  # the second run loaded the train and evaluation steps
