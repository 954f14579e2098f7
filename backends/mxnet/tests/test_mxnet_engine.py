"""What this engine handles beyond the conformance kit: MXNet 1.9's quirks.

Checks that depend on how MXNet is first imported (threads, numpy.bool) or
that could hang (sync BatchNorm) run in a subprocess with a time limit.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import multidev
from multidev import load_backend, shard_sizes
from multidev.rules.batchnorm import BN_EPS, BN_MOMENTUM
from multidev.rules.devices import resolve_devices
from multidev.rules.optimizers import Optimizer
from multidev.testing import LENET, RESNET, SAME_ENGINE_RTOL, assert_states_close, assert_states_equal, batch

TIME_LIMIT = 180  # seconds; a healthy run takes a few


def run_python(code: str, **env: str | None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; env values of None unset the variable."""
    environ = dict(os.environ)
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=TIME_LIMIT, env=environ)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the subprocess ran past {TIME_LIMIT} s (a hang?)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.slow
def test_import_multidev_loads_no_mxnet_and_no_numpy_bool():
    proc = run_python("""
        import sys
        import numpy as np
        import multidev
        assert "mxnet" not in sys.modules, "import multidev imported mxnet"
        had_bool = "bool" in np.__dict__
        engine = multidev.load_backend("mxnet")
        assert "mxnet" not in sys.modules, "creating the engine loaded mxnet"
        engine.gpu_count()
        assert "mxnet" in sys.modules
        print(had_bool, "bool" in np.__dict__, np.__version__)
    """)
    had, has, version = proc.stdout.split()
    if int(version.split(".")[0]) < 2:  # numpy 2 has numpy.bool of its own
        assert (had, has) == ("False", "False"), "the numpy.bool alias leaked out of the engine's MXNet import"


@pytest.mark.slow
@pytest.mark.parametrize("given", [None, "1"], ids=["unset", "set"])
def test_thread_count_is_reported_and_the_environment_left_alone(given):
    """The engine sets no variable: it reports MXNet's thread count, and warns when MXNet took half the cores."""
    proc = run_python("""
        import logging, os
        logging.basicConfig(level=logging.INFO)
        import multidev
        engine = multidev.load_backend("mxnet")
        print(engine.settings()["threads"])
        print(os.environ.get("OMP_NUM_THREADS", "unset"))
    """, OMP_NUM_THREADS=given)
    version, after = proc.stdout.strip().splitlines()
    cores = len(os.sched_getaffinity(0))
    assert after == (given or "unset"), f"the engine left OMP_NUM_THREADS={after} behind"
    if given is not None:
        assert f"OMP_NUM_THREADS={given} from the environment" in version
    elif cores > 1:
        assert f"MXNet uses {cores // 2} of {cores} cores" in version
        assert "UserWarning: OMP_NUM_THREADS unset when" in proc.stderr, "no warning line"
    assert "multidev.mxnet" in proc.stderr, "no log line"


@pytest.mark.slow  # a fresh interpreter loading MXNet to train: 7 s of the quick suite on a Zen 3 EPYC
def test_the_command_gives_mxnet_every_core():
    """The multidev program sets its own thread count at start-up, before MXNet loads."""
    proc = run_python("""
        import sys
        from multidev.cli import main
        sys.exit(main(["backends"]))
    """, OMP_NUM_THREADS=None)
    cores = len(os.sched_getaffinity(0))
    listing = proc.stdout.split("mxnet:", 1)[1]
    assert f"threads: OMP_NUM_THREADS={cores} from the environment" in listing, proc.stdout


@pytest.mark.slow  # a fresh interpreter loading MXNet for sync BatchNorm: 9 s of the quick suite on a Zen 3 EPYC
def test_sync_batchnorm_does_not_hang():
    proc = run_python("""
        import multidev
        from multidev import resolve_devices
        from multidev.testing import RESNET, batch
        engine = multidev.load_backend("mxnet")
        # uneven shards, then a batch smaller than the device count (two of three contexts busy)
        for k, size in [(2, 9), (3, 2)]:
            setup = multidev.Setup(RESNET, resolve_devices(devices=k), "sync")
            reps = multidev.replicate(engine, setup, RESNET.init(0))
            for step in range(2):
                x, y = batch(RESNET, size, seed=step)
                reps.train_step(reps.place(multidev.cut(x, y, multidev.shard_sizes(size, k))), lr=0.1)
            reps.gradients(reps.place(multidev.cut(x, y, multidev.shard_sizes(size, k))))
        print("ok")
    """)
    assert proc.stdout.strip() == "ok"


@pytest.fixture(scope="module")
def engine():
    return load_backend("mxnet")


def test_mxnet_batchnorm_follows_core_conventions(engine):
    """The engine relies on this: biased running variance, momentum flipped, updated in backward."""
    from multidev_mxnet.batchnorm import BatchNorm, mx

    bn = BatchNorm(3)
    bn.initialize(ctx=mx.cpu(0))
    x = np.random.default_rng(0).normal(1, 2, (4, 3, 5, 5)).astype(np.float32)
    with mx.autograd.record():
        out = bn(mx.nd.array(x))
    out.backward()
    m = BN_MOMENTUM
    np.testing.assert_allclose(bn.running_mean.data().asnumpy(), m * x.mean((0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.data().asnumpy(), (1 - m) + m * x.var((0, 2, 3)), rtol=1e-5)
    normalised = (x - x.mean((0, 2, 3), keepdims=True)) / np.sqrt(x.var((0, 2, 3), keepdims=True) + BN_EPS)
    np.testing.assert_allclose(out.asnumpy(), normalised, atol=1e-5)


@pytest.mark.parametrize("spec,batchnorm", [(LENET, "local"), (RESNET, "local"), (RESNET, "sync")],
                         ids=["lenet", "resnet18-local", "resnet18-sync"])
def test_step_with_fewer_samples_than_devices(engine, spec, batchnorm):
    """Idle contexts hand the kvstore a zero gradient: the step is one device's and replicas agree."""
    x, y = batch(spec, 1, seed=3)
    one, reps = (multidev.replicate(engine, multidev.Setup(spec, resolve_devices(devices=k), batchnorm=batchnorm),
                                    spec.init(0)) for k in (1, 3))
    for _ in range(2):  # twice: a stale gradient from the first step must not leak into the second
        one.train_step(one.place(multidev.cut(x, y, [1])), lr=0.1)
        reps.train_step(reps.place(multidev.cut(x, y, shard_sizes(1, 3))), lr=0.1)
    assert_states_equal(reps.replica_states(), promise="idle contexts drift from the active one")
    assert_states_close(reps.state(), one.state(), rtol=SAME_ENGINE_RTOL,
                        promise="a step with idle contexts is not one device's step")


def test_gradients_leave_running_statistics_alone(engine):
    reps = multidev.replicate(engine, multidev.Setup(RESNET, resolve_devices(devices=2)), RESNET.init(0))
    before = reps.state()
    x, y = batch(RESNET, 6)
    reps.gradients(reps.place(multidev.cut(x, y, shard_sizes(6, 2))))
    assert_states_equal([reps.state(), before], promise="gradients() changed the model")



def _steps(reps, parts, x, y, k: int) -> None:
    """One update of the rows of ``x`` as micro-batches ``parts`` (row ranges) over ``k`` devices."""
    for j, (a, b) in enumerate(parts):
        shards = dataclasses.replace(multidev.cut(x[a:b], y[a:b], shard_sizes(b - a, k)), whole=len(x))
        placed = reps.place(shards)
        reps.train_step(placed, lr=0.1) if j == len(parts) - 1 else reps.accumulate(placed)


def _step_of(reps, spec) -> np.ndarray:
    start = spec.init(0)
    return np.concatenate([(reps.state()[n] - start[n]).ravel() for n in spec.trainable()])


def test_idle_contexts_hand_on_earlier_micro_batches(engine):
    """grad_req="add": a context idle in the last micro-batch still holds its earlier ones (LeNet: rows are apart)."""
    x, y = batch(LENET, 4, seed=7)
    optimizer = Optimizer(momentum=0.9)
    one = multidev.replicate(engine, multidev.Setup(LENET, resolve_devices(devices=1), optimizer=optimizer),
                             LENET.init(0))
    one.train_step(one.place(multidev.cut(x, y, [4])), lr=0.1)
    reps = multidev.replicate(engine, multidev.Setup(LENET, resolve_devices(devices=3), optimizer=optimizer,
                                                     accumulate=2), LENET.init(0))
    _steps(reps, [(0, 3), (3, 4)], x, y, 3)  # devices 1 and 2 sit the second micro-batch out
    assert_states_equal(reps.replica_states(), promise="accumulate: replicas drift apart")
    assert_states_close(reps.state(), one.state(), rtol=SAME_ENGINE_RTOL,
                        promise="accumulate: micro-batches 3 + 1 on 3 devices are not the update of their 4 rows")


def test_bf16_micro_batches_add_up(bf16):
    """MXNet 1.9.1's amp_cast to bfloat16 drops grad_req="add" (the gradient stays 0): the engine's identity keeps
    it."""
    x, y = batch(LENET, 8, seed=7)
    setup = dict(precision="bf16", optimizer=Optimizer(momentum=0.9))
    whole = multidev.replicate(bf16, multidev.Setup(LENET, resolve_devices(devices=1), **setup), LENET.init(0))
    whole.train_step(whole.place(multidev.cut(x, y, [8])), lr=0.1)
    parts = multidev.replicate(bf16, multidev.Setup(LENET, resolve_devices(devices=1), accumulate=2, **setup),
                               LENET.init(0))
    _steps(parts, [(0, 4), (4, 8)], x, y, 1)
    want, got = _step_of(whole, LENET), _step_of(parts, LENET)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert err < 0.05, f"bf16: two micro-batches of 4 rows are {err:.2f} of the step away from one batch of 8"


def test_load_state_keeps_the_optimizer_state(engine):
    """The kvstore that updates is started afresh by load_state; the momentum it held must carry over."""
    reps = multidev.replicate(engine, multidev.Setup(LENET, resolve_devices(devices=2),
                                                     optimizer=Optimizer(momentum=0.9)), LENET.init(0))
    x, y = batch(LENET, 6)
    reps.train_step(reps.place(multidev.cut(x, y, [3, 3])), lr=0.1)
    before = reps.optimizer_state()
    reps.load_state(reps.state())
    assert_states_equal([reps.optimizer_state(), before], promise="load_state lost the optimizer's state")


def test_accumulating_needs_setup_accumulate(engine):
    reps = multidev.replicate(engine, multidev.Setup(LENET, resolve_devices(devices=1)), LENET.init(0))
    x, y = batch(LENET, 2)
    with pytest.raises(multidev.MultidevError, match="accumulate"):
        reps.accumulate(reps.place(multidev.cut(x, y, [2])))

def test_devices_are_mxnet_contexts(engine):
    reps = multidev.replicate(engine, multidev.Setup(LENET, resolve_devices(devices=["cpu:0", "cpu:2"])), LENET.init(0))
    assert [str(c) for c in reps.contexts] == ["cpu(0)", "cpu(2)"]
    shards = reps.place(multidev.cut(batch(LENET, 5)[0], batch(LENET, 5)[1], [3, 2]))
    assert [str(s.x.context) for s in shards] == ["cpu(0)", "cpu(2)"]


@pytest.mark.parametrize("has_avx512", [True, False])
def test_bf16_is_claimed_where_the_cpus_onednn_computes_it(monkeypatch, has_avx512):
    """oneDNN's bfloat16 convolutions need AVX-512: on an AVX2 CPU (a Zen 3 EPYC) MXNet failed inside the first one."""
    from multidev_mxnet import backend, bf16_support

    flags = {"fma", "avx2"} | ({"avx512f", "avx512bw", "avx512vl", "avx512dq"} if has_avx512 else set())
    monkeypatch.setattr(bf16_support, "flags", lambda: frozenset(flags))
    engine = backend.MXNetBackend()
    assert ("bf16" in engine.capabilities) == has_avx512
    assert backend.MXNetBackend.capabilities.isdisjoint({"bf16"}), "one machine's answer leaked into the class"
    if not has_avx512:
        assert "AVX-512" in bf16_support.bf16_note() and "this CPU has AVX2" in bf16_support.bf16_note()
        with pytest.raises(multidev.MultidevError, match="the mxnet engine does not offer bf16: use --precision fp32"):
            multidev.train(engine, precision="bf16", epochs=1)
