"""BatchNorm's sums: every form computes the same sums, and the measured choice is made once per shape and kept."""

import json

import numpy as np
import pytest

pytest.importorskip("jax")


@pytest.fixture(scope="module")
def engine():
    from multidev import load_backend

    return load_backend("jax")


@pytest.fixture
def sums(engine, monkeypatch, afresh):
    """The sums' form measuring afresh, its choices kept in a folder of this test's own; ``sums.measured``: the
    shapes measured, in order (the real measuring, counted)."""
    from multidev_jax.forms import SUMS, sums

    engine.max_cpu_devices()
    afresh(SUMS)
    measured = []
    real = sums.measure
    monkeypatch.setattr(sums, "measure", lambda shape, dtype: measured.append(shape) or real(shape, dtype))
    monkeypatch.setattr(sums, "measured_shapes", measured, raising=False)  # for the tests to read; undone after
    return sums


# staged's paths: every pixel of a row at once (4x5), a row's width in one stage (5x10) or in chunks of it (3x64:
# 2 x 32), and a prime width over 32 (2x37: chunks of one pixel); feature vectors (dense BatchNorm)
@pytest.mark.parametrize("shape", [(6, 5, 4, 3), (6, 5, 10, 3), (4, 3, 64, 2), (3, 2, 37, 2), (6, 7)])
def test_every_form_is_the_weighted_sums_of_float64_truth(engine, shape):
    from multidev_jax.forms import SUMS, sums
    from multidev_jax.parallel import x64

    engine.max_cpu_devices()
    rng = np.random.default_rng(0)
    a, weight = rng.normal(size=shape), rng.integers(0, 2, shape[0]).astype(np.float64)
    want = np.einsum("n...,n->...", a, weight).reshape(-1, shape[-1]).sum(axis=0)
    with x64():
        for name in SUMS.forms:
            got = np.asarray(sums.summing(name)(a, weight))
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)


def test_a_shape_is_measured_once_and_the_choice_is_kept_for_later_runs(sums, tmp_path, monkeypatch):
    first = sums.form((8, 4, 4, 16), np.float32)
    assert first in sums.SUMS.forms and sums.measured_shapes == [(8, 4, 4, 16)]
    assert sums.form((8, 4, 4, 16), np.float32) == first and len(sums.measured_shapes) == 1
    key = "8x4x4x16:float32:matvec,reduce,staged"
    assert json.loads((tmp_path / "sums.json").read_text()) == {key: first}
    # a later run reads the file instead of measuring: make the saved choice the other form to see it is read
    other = next(f for f in sums.SUMS.forms if f != first)
    (tmp_path / "sums.json").write_text(json.dumps({key: other}))
    sums.SUMS.kept.forget()
    monkeypatch.setattr(sums, "measure", None)  # measuring again would fail
    assert sums.form((8, 4, 4, 16), np.float32) == other
    assert f"{other} for 1" in sums.SUMS.note()


def test_pinned_gpus_and_jobs_without_a_store_measure_nothing(sums, monkeypatch):
    import jax

    monkeypatch.setattr(sums, "measure", None)
    assert sums.settled(cpu=False) == "matvec", "GPUs: one form for every shape"
    assert sums.settled(cpu=True) is None, "CPUs: each shape's measured form"
    monkeypatch.setenv(sums.SUMS.env, "reduce")
    assert sums.settled(cpu=True) == "reduce" and "MULTIDEV_JAX_SUMS=reduce" in sums.SUMS.note()
    monkeypatch.delenv(sums.SUMS.env)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    assert sums.form((8, 4, 4, 16), np.float32) == sums.SUMS.in_job


def test_the_runs_form_is_what_the_model_sums_with(engine, monkeypatch):
    """The run's value: a pin is the form's own function for every shape, no pin on a CPU each shape's measured one."""
    import multidev
    from multidev_jax.forms import sums

    spec = multidev.ModelSpec("resnet18", (1, 6, 6), 10)
    devices = multidev.resolve_devices(devices=1, max_cpu=engine.max_cpu_devices())
    for pin, want in (("staged", sums.staged), ("", sums.measured)):
        monkeypatch.setenv(sums.SUMS.env, pin)
        reps = multidev.replicate(engine, multidev.Setup(spec, devices), spec.init(0))
        assert reps.forms.sums == (pin or None) and sums.summing(reps.forms.sums) is want


@pytest.mark.slow  # times every BatchNorm shape of ResNet-18 under both forms: 8 s on a Zen 3 EPYC
def test_a_step_measures_its_batchnorm_shapes_while_it_compiles(sums, tmp_path):
    """The measuring runs while the step is traced (outside that trace): the step then trains as before."""
    import jax

    import multidev

    jax.clear_caches()  # the step is traced afresh: an earlier test's trace of the same step would not measure
    engine = multidev.load_backend("jax")
    spec = multidev.ModelSpec("resnet18", (1, 6, 6), 10)  # shapes of this test alone
    reps = multidev.replicate(engine, multidev.Setup(spec, multidev.resolve_devices(devices=2, max_cpu=8)),
                              spec.init(0))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(10, 1, 6, 6)).astype(np.float32), rng.integers(0, 10, 10)
    stats = reps.train_step(reps.place(multidev.cut(x, y, multidev.shard_sizes(10, 2))), 0.1)
    assert np.isfinite(stats.loss_sum) and stats.count == 10
    saved = json.loads((tmp_path / "sums.json").read_text())
    assert "8x6x6x64:float32:matvec,reduce,staged" in saved and set(saved.values()) <= set(sums.SUMS.forms)
