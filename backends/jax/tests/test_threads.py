"""XLA's threads per step: what the environment pins, and the measured choice (once per step, kept, run untouched)."""

import json

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
    from multidev_jax.forms import threads

    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.setenv("XLA_FLAGS", flags)
    monkeypatch.setenv(threads.THREADS.env, env)
    assert threads.options(threads.THREADS.pinned()) == want


@pytest.fixture
def measuring(monkeypatch, afresh):
    """The threads' form measuring afresh, its choices in a folder of this test's own, no step compiled yet."""
    from multidev_jax.forms import THREADS, threads

    multidev.load_backend("jax").max_cpu_devices()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    afresh(THREADS)
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
    choice = measuring.THREADS
    assert len(train) == 1 and choice.kept.measured == [train[0]] and set(saved.values()) <= set(choice.forms)
    chosen = saved[train[0]]
    assert f"{choice.labels[chosen]} for 1" in choice.note()
    # the timed runs used copies: the run equals one that only ever ran the chosen form
    monkeypatch.setenv(choice.env, chosen)
    monkeypatch.setattr(compiled, "_CACHE", {})
    assert_states_equal([measured, _train(2)], promise="measuring XLA's threads leaves the run as it was")
    # a later run reads the file instead of measuring: make the saved choice the other form to see it is read
    monkeypatch.delenv(choice.env)
    monkeypatch.setattr(compiled, "_CACHE", {})
    other = next(f for f in choice.forms if f != chosen)
    (tmp_path / "threads.json").write_text(json.dumps({train[0]: other}))
    choice.kept.forget()
    monkeypatch.setattr(measuring, "best_seconds", None)  # measuring again would fail
    forms = []
    real = measuring.options
    monkeypatch.setattr(measuring, "options", lambda form: forms.append(form) or real(form))
    _train(2, steps=1)
    assert forms == [other]


def test_one_device_measures_nothing(measuring, monkeypatch, tmp_path):
    monkeypatch.setattr(measuring, "best_seconds", None)
    state = _train(1, steps=1)
    assert all(np.isfinite(v).all() for v in state.values())
    assert measuring.THREADS.kept.measured == [] and not (tmp_path / "threads.json").exists()


def test_a_long_step_is_timed_fewer_times():
    import time

    from multidev_jax.forms import threads

    calls = []

    def step() -> None:
        calls.append(1)
        time.sleep(0.03)

    assert threads.best_seconds(step, (), repeats=3, budget=10.0) >= 0.03 and len(calls) == 4  # one untimed, 3 timed
    calls.clear()
    threads.best_seconds(step, (), repeats=3, budget=0.05)
    assert len(calls) == 2  # the untimed run and one timed: together over the budget


class _AnyKey(dict):
    """A store where rank 0 published ``form`` for every key."""

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form

    def __missing__(self, key: str) -> str:
        return self.form


def _lowered_on(devices: int):
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices("cpu")[:devices]), ("data",))
    args = (jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, PartitionSpec("data"))),)
    return jax.jit(lambda x: x * 2).lower(*args), args


@pytest.mark.parametrize("rank", [0, 1])
def test_the_processes_of_a_job_take_rank_0s_choice_and_measure_nothing(measuring, job, monkeypatch, rank):
    import jax

    monkeypatch.setattr(jax, "process_index", lambda: rank)
    monkeypatch.setattr(measuring, "best_seconds", None)  # measuring would fail
    lowered, args = _lowered_on(2)
    forms = []
    real = measuring.options
    monkeypatch.setattr(measuring, "options", lambda form: forms.append(form) or real(form))
    if rank == 0:  # rank 0 publishes what its own machine kept (nothing kept: the default)
        measuring.compile(lowered, "f", args, None)
        assert forms == ["cores"] and list(job.values.values()) == ["cores"]
    else:  # the others take what rank 0 published, whatever their own file says
        monkeypatch.setattr(measuring.THREADS.kept, "get", lambda key: "cores")
        job.values = _AnyKey("one")
        measuring.compile(lowered, "f", args, None)
        assert forms == ["one"]


def test_one_device_measures_nothing_and_reads_nothing(measuring, monkeypatch):
    monkeypatch.setattr(measuring, "best_seconds", None)
    monkeypatch.setattr(measuring.THREADS.kept, "get", None)  # reading the file would fail
    lowered, args = _lowered_on(1)
    assert np.asarray(measuring.compile(lowered, "f", args, None)(*args)).tolist() == list(np.arange(8.0) * 2)


def test_sums_in_a_job_take_rank_0s_form(job, monkeypatch, tmp_path, afresh):
    import jax

    from multidev_jax.forms import SUMS, sums

    afresh(SUMS)
    monkeypatch.setattr(sums, "measure", None)
    key = "8x4x4x16:float32:matvec,reduce,staged"
    (tmp_path / "sums.json").write_text(json.dumps({key: "reduce"}))
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    job.values[f"multidev/sums.json/{key}"] = "matvec"
    assert sums.form((8, 4, 4, 16), np.float32) == "matvec"  # rank 0's, not this machine's file
    SUMS.kept.forget()
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    job.values.clear()
    assert sums.form((8, 4, 4, 16), np.float32) == "reduce"
    assert job.values == {f"multidev/sums.json/{key}": "reduce"}


def test_rank_0_of_a_job_measures_a_new_shape_and_every_rank_takes_its_form(job, monkeypatch, tmp_path, afresh):
    """A job's workers once took matrix-vector sums for every shape rank 0 had not met alone: measured now."""
    import jax

    from multidev_jax.forms import SUMS, sums

    afresh(SUMS)
    monkeypatch.setattr(sums, "measure", lambda shape, dtype: "staged")
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    key = "8x4x4x16:float32:matvec,reduce,staged"
    assert sums.form((8, 4, 4, 16), np.float32) == "staged"
    assert job.values == {f"multidev/sums.json/{key}": "staged"}, "published for the other ranks"
    assert json.loads((tmp_path / "sums.json").read_text()) == {key: "staged"}, "and kept, as a run alone keeps it"
    SUMS.kept.forget()
    monkeypatch.setattr(sums, "measure", None)  # rank 1 measures nothing: it waits for rank 0's answer
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    assert sums.form((8, 4, 4, 16), np.float32) == "staged"


def test_a_later_job_of_the_same_processes_agrees_afresh(job, monkeypatch, tmp_path):
    """Under Ray Train a worker process can serve two jobs: the second one's rank 0 decides for it, not the first's."""
    import jax
    from jax._src.distributed import global_state

    from multidev_jax.forms.choice import Kept

    kept = Kept("threads.json", ("cores", "one"), folder=lambda: tmp_path)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    job.values["multidev/threads.json/step"] = "one"
    assert kept.agreed("step", "cores") == "one"
    monkeypatch.setattr(global_state, "client", type(job)(**{"multidev/threads.json/step": "cores"}))  # a new job
    assert kept.agreed("step", "cores") == "cores"
