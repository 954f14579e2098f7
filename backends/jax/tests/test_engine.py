"""What is particular to the JAX engine: its CPU device count, compile caching, padding."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import multidev
from multidev import Device, ModelSpec, MultidevError, load_backend, resolve_devices, shard_sizes
from multidev.testing import RESNET, batch


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("MULTIDEV_JAX_CPU_DEVICES", "XLA_FLAGS")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env={**environ, **env}, check=False)


@pytest.fixture(scope="module")
def engine():
    return load_backend("jax")


def make(engine, spec: ModelSpec, k: int, batchnorm: str = "local"):
    devices = resolve_devices(devices=k, max_cpu=engine.max_cpu_devices())
    return multidev.replicate(engine, multidev.Setup(spec, devices, batchnorm=batchnorm), spec.init(0))


# Devices -----------------------------------------------------------------
def test_import_multidev_does_not_import_jax():
    proc = run_python("import sys, multidev; print('jax' in sys.modules, 'multidev_jax' in sys.modules)")
    assert proc.stdout.split() == ["False", "False"], proc.stderr


def test_engine_gives_jax_the_default_cpu_devices():
    proc = run_python("""
        from multidev import load_backend
        from multidev_jax.devices import DEFAULT_CPU_DEVICES
        print(load_backend("jax").max_cpu_devices() == DEFAULT_CPU_DEVICES)""")
    assert proc.stdout.strip() == "True", proc.stderr


@pytest.mark.parametrize("planned, cores, want", [(1, 2, 2), (2, 2, 2), (4, 2, 4), (1, 1, 1), (3, 16, 16)])
def test_a_planned_run_gets_its_devices_and_one_per_core(monkeypatch, planned, cores, want):
    """No more devices than the run needs: XLA:CPU sizes its thread pools by the device count."""
    from multidev_jax import devices

    monkeypatch.setattr(devices, "usable_cores", lambda: cores)
    assert devices.default_cpu_devices(planned) == want
    assert devices.default_cpu_devices(None) == devices.DEFAULT_CPU_DEVICES, "no plan: the default"
    monkeypatch.setenv("MULTIDEV_JAX_CPU_DEVICES", "3")
    assert devices.requested_cpu_devices(planned) == 3, "the user's count stands"


@pytest.mark.slow  # a fresh interpreter that trains: the quick suite keeps the unit test above
def test_a_run_plans_jaxs_devices_and_a_later_run_that_wants_more_is_told_what_to_set():
    proc = run_python("""
        import os
        import multidev
        from multidev.cli import main
        main(["train", "--backend", "jax", "--model", "mlp", "--dataset", "synthetic", "--epochs", "1",
              "--no-progress", "--devices", "cpu:0,cpu:2"])
        import jax
        have = len(jax.devices("cpu"))
        print("devices", have, max(3, len(os.sched_getaffinity(0))))
        try:
            multidev.train("jax", model="mlp", dataset="synthetic", epochs=1, devices=have + 1, progress=False)
        except multidev.MultidevError as err:
            print("refused:", err)""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    have, want = next(line for line in proc.stdout.splitlines() if line.startswith("devices ")).split()[1:]
    assert have == want, proc.stdout
    refusal = proc.stdout.split("refused: ")[-1]
    assert "this engine offers" in refusal and "MULTIDEV_JAX_CPU_DEVICES set before JAX starts" in refusal, refusal


def test_env_override_sets_the_count():
    proc = run_python("from multidev import load_backend; print(load_backend('jax').max_cpu_devices())",
                      MULTIDEV_JAX_CPU_DEVICES="3")
    assert proc.stdout.strip() == "3", proc.stderr


@pytest.mark.slow  # a fresh interpreter loading every engine: 7 s of the quick suite on a Zen 3 EPYC
def test_bad_env_override_is_one_clear_line():
    proc = run_python("import sys; from multidev.cli import main; sys.exit(main(['backends']))",
                      MULTIDEV_JAX_CPU_DEVICES="lots")
    assert "Traceback" not in proc.stderr
    assert "MULTIDEV_JAX_CPU_DEVICES='lots' is not a whole number" in proc.stdout + proc.stderr


@pytest.mark.parametrize("start, started_with", [
    pytest.param("jax.config.update('jax_num_cpu_devices', 2); jax.devices()", 2,  # the user fixed the count
                 marks=pytest.mark.slow),  # a second JAX start for the same message: the quick suite keeps one
    ("jax.devices()", 1),  # JAX started with its default before the engine could set it
], ids=["user-set", "default"])
@pytest.mark.slow
def test_more_devices_than_jax_started_with_is_a_clear_error(start, started_with):
    """JAX started before the engine: asking for one device more says what to do, no traceback."""
    k = started_with + 1
    proc = run_python(f"""
        import sys, jax
        {start}
        import multidev
        from multidev import Device, ModelSpec, MultidevError, load_backend
        from multidev.cli import main
        engine = load_backend("jax")
        print("offers", engine.max_cpu_devices())
        spec = ModelSpec("lenet", (1, 16, 16), 10)
        try:
            multidev.replicate(engine, multidev.Setup(spec, [Device("cpu", i) for i in range({k})]), spec.init(0))
        except MultidevError as exc:
            print("replicate:", exc)
        sys.exit(main(["train", "--backend", "jax", "--devices", "{k}", "--no-progress"]))""")
    out = proc.stdout.splitlines()
    assert out[0] == f"offers {started_with}", proc.stderr
    assert out[1].startswith(f"replicate: cpu:{k - 1} asked for but JAX started with {started_with} CPU device(s)")
    assert f"MULTIDEV_JAX_CPU_DEVICES={k}" in out[1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"multidev: error: {k} CPU devices asked for"), lines
    proc = run_python(f"""
        import jax
        {start}
        from multidev.cli import main
        main(["backends"])""")
    assert f"cpu devices: {started_with}" in proc.stdout, proc.stdout + proc.stderr
    if "config.update" not in start:
        assert "JAX started before the engine could set 8" in proc.stdout, proc.stdout


def test_mixed_device_kinds_are_refused(engine):
    with pytest.raises(MultidevError, match="one kind of device"):
        multidev.replicate(engine, multidev.Setup(RESNET, [Device("cpu", 0), Device("gpu", 0)]), RESNET.init(0))


@pytest.mark.parametrize("env", ["MULTIDEV_JAX_SUMS", "MULTIDEV_JAX_THREADS", "MULTIDEV_JAX_PARTS",
                                 "MULTIDEV_JAX_CONV_INPUTS"])
def test_a_misspelt_pin_is_refused_in_one_line_before_anything_compiles(engine, monkeypatch, env):
    monkeypatch.setenv(env, "matvek")
    with pytest.raises(MultidevError, match=f"{env}='matvek' names no form: give one of") as err:
        make(engine, RESNET, 1)
    assert "\n" not in str(err.value)
    with pytest.raises(MultidevError, match=env):  # multidev backends: the engine unusable, and why
        engine.settings()


# Compilation -------------------------------------------------------------
def test_compile_seconds_paid_once_per_shape(engine):
    from multidev_jax.compiled import cached_count

    spec = ModelSpec("lenet", (1, 15, 15), 7)  # a shape no other test compiles
    x, y = batch(spec, 10, seed=1)
    first = make(engine, spec, 2)
    assert first.compile_seconds == 0.0
    first.train_step(first.place(multidev.cut(x, y, shard_sizes(10, 2))), lr=0.1)
    assert first.compile_seconds > 0, "the first step compiles and reports it"
    paid, executables = first.compile_seconds, cached_count()
    first.train_step(first.place(multidev.cut(x, y, shard_sizes(10, 2))), lr=0.05)  # new lr: no recompile
    x9, y9 = batch(spec, 9, seed=2)  # 5 + 4 rows pad to the same 8-aligned shard length
    first.train_step(first.place(multidev.cut(x9, y9, shard_sizes(9, 2))), lr=0.1)
    assert first.compile_seconds == paid and cached_count() == executables
    second = make(engine, spec, 2)
    second.train_step(second.place(multidev.cut(x, y, shard_sizes(10, 2))), lr=0.1)
    assert second.compile_seconds == 0.0 and cached_count() == executables, "a second replica set recompiled"


def test_a_short_batch_runs_the_full_batchs_program_where_the_run_names_its_rows(engine):
    """``Setup.rows``: an epoch's last batch (and evaluation's) pads to a full batch's shard length instead of
    compiling programs of its own; the padding changes no sum (float64: to rounding)."""
    from multidev_jax.compiled import cached_count

    spec = ModelSpec("lenet", (1, 14, 14), 6)  # a shape no other test compiles
    x, y = batch(spec, 20, seed=4)
    answers = []
    for rows in (20, None):
        devices = resolve_devices(devices=2, max_cpu=engine.max_cpu_devices())
        reps = multidev.replicate(engine, multidev.Setup(spec, devices, dtype="float64", rows=rows),
                                  spec.init(0))
        reps.train_step(reps.place(multidev.cut(x, y, shard_sizes(20, 2))), lr=0.1)
        reps.evaluate(reps.place(multidev.cut(x, y, shard_sizes(20, 2))))
        executables = cached_count()
        reps.train_step(reps.place(multidev.cut(x[:5], y[:5], shard_sizes(5, 2))), lr=0.1)  # 3 + 2 rows
        loss = reps.evaluate(reps.place(multidev.cut(x[:5], y[:5], shard_sizes(5, 2)))).loss_sum
        assert (cached_count() == executables) == (rows is not None), f"rows={rows}: programs compiled"
        answers.append((reps.state(), loss))
    (padded, loss), (own, own_loss) = answers
    assert abs(loss - own_loss) <= 1e-12 * abs(own_loss)
    assert all(np.allclose(padded[n], own[n], rtol=1e-12, atol=1e-14) for n in own)


# Padding and empty shards ------------------------------------------------
def test_padding_never_reaches_the_host(engine):
    x, y = batch(RESNET, 3, seed=3)
    reps = make(engine, RESNET, 4)
    shards = reps.shards(reps.place(multidev.cut(x, y, shard_sizes(3, 4))))
    assert [len(s) for s in shards] == [1, 1, 1, 0]
    assert np.array_equal(np.concatenate(shards), x)


# Persistent compilation cache ------------------------------------------------
def _train_json(tmp_path, name: str, cache: str) -> dict:
    import json

    out = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k != "MULTIDEV_COMPILE_CACHE"}
    subprocess.run([sys.executable, "-m", "multidev", "train", "--backend", "jax", "--model", "lenet", "--dataset",
                    "synthetic", "--epochs", "1", "--no-progress", "--json", str(out)], check=True,
                   capture_output=True, text=True, timeout=300, env={**env, "MULTIDEV_COMPILE_CACHE": cache})
    return json.loads(out.read_text())


@pytest.mark.slow  # two JAX runs in child processes (7 s)
def test_a_second_run_loads_its_programs_from_the_persistent_cache(tmp_path):
    cache = str(tmp_path / "cache")
    first, second = (_train_json(tmp_path, name, cache) for name in ("first", "second"))
    assert first["compile_cached"] == 0
    assert second["compile_cached"] >= 2, second  # the train and evaluation steps at least
    assert second["compile_seconds"] < first["compile_seconds"], (first["compile_seconds"], second["compile_seconds"])
    assert second["epochs"][0]["train_acc"] == first["epochs"][0]["train_acc"]  # the same programs' answers
    folders = list((tmp_path / "cache").iterdir())
    assert len(folders) == 1, folders  # one folder per CPU kind


@pytest.mark.slow  # two JAX starts in child processes
def test_the_persistent_cache_can_be_switched_off(tmp_path):
    run = _train_json(tmp_path, "off", "off")
    assert run["compile_cached"] == 0 and run["compile_seconds"] > 0


# BatchNorm's written-out backward pass -----------------------------------------
# the quick suite takes the sync form (7-10 s each to compile on a Zen 3): it reads the whole batch's moments too
@pytest.mark.parametrize("sync", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_batchnorm_gradient_is_autodiff_of_the_plain_formula(engine, sync):
    """normalize's custom backward against jax.grad of BatchNorm written plainly, in float64, padded uneven shards."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P
    from multidev_jax.allreduce import Rows, vary
    from multidev_jax.batchnorm import normalize
    from multidev_jax.devices import AXIS
    from multidev_jax.forms.sums import matvec
    from multidev_jax.parallel import x64

    engine.max_cpu_devices()
    sizes, length, eps = (3, 1), 4, 1e-5
    rng = np.random.default_rng(0)
    real = [rng.normal(1.0, 2.0, (n, 3, 3, 5)) for n in sizes]
    weights = [rng.normal(size=(n, 3, 3, 5)) for n in sizes]  # the loss: sum(out * weight) over the real rows
    gamma, beta = rng.normal(size=5), rng.normal(size=5)

    def pad(parts, fill=7.0):  # padding rows hold junk, which must not matter
        return np.concatenate([np.concatenate([p, np.full((length - len(p), *p.shape[1:]), fill)]) for p in parts])

    def plain(parts, gamma, beta):
        groups = [jnp.concatenate(parts)] if sync else parts
        total = 0.0
        for group, w in zip(groups, [jnp.concatenate(weights)] if sync else weights):
            mean, var = group.mean(axis=(0, 1, 2)), group.var(axis=(0, 1, 2))
            total += jnp.sum(((group - mean) / jnp.sqrt(var + eps) * gamma + beta) * w)
        return total

    with x64():
        mesh = Mesh(np.array(jax.devices("cpu")[:2]), (AXIS,))
        mask = pad([np.ones(n) for n in sizes], fill=0.0)

        def shard_loss(x, mask, w, gamma, beta):
            # each device's own copy of gamma and beta, as the engine's steps differentiate: their gradient is
            # per device and vary's transpose sums it over the mesh
            out, _ = normalize(x, mask, *vary((gamma, beta), AXIS), Rows(sync), matvec)
            return jax.lax.psum(jnp.sum(out * w), AXIS)

        loss = jax.shard_map(shard_loss, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P(AXIS), P(), P()), out_specs=P())
        got = jax.grad(loss, argnums=(0, 3, 4))(pad(real), mask, pad(weights, fill=0.0), gamma, beta)
        want = jax.grad(plain, argnums=(0, 1, 2))([jnp.asarray(p) for p in real], gamma, beta)
    dx = np.asarray(got[0]).reshape(2, length, 3, 3, 5)
    for i, n in enumerate(sizes):
        np.testing.assert_allclose(dx[i, :n], want[0][i], rtol=1e-9, atol=1e-12)
        assert not dx[i, n:].any(), "padding rows must get no gradient"
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-9)
