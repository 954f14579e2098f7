"""A run from its settings: what a resumed run must share with its checkpoint."""

import pytest

from multidev.data import synthetic
from multidev.errors import MultidevError, PeerLost
from multidev.rules.devices import Device
from multidev.testing import LENET
from multidev.testing.fake import FakeEngine
from multidev.training.api import train


def test_resume_with_another_optimizer_is_refused(tmp_path):
    data = synthetic(n_train=16, n_test=4, shape=LENET.in_shape)
    kwargs = dict(model="lenet", dataset=data, batch_size=8)
    train(FakeEngine(), epochs=1, checkpoint=tmp_path / "c.npz", momentum=0.9, **kwargs)
    with pytest.raises(MultidevError, match="was trained with sgd m0.9, this run asks for adamw"):
        train(FakeEngine(), epochs=2, resume=tmp_path / "c.npz", optimizer="adamw", **kwargs)


def _dropout_net():
    from multidev import nn
    return nn.Sequential(nn.Conv2d(3, 3, padding=1), nn.Tanh(), nn.Dropout(0.5), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Dropout(0.25), nn.Dense())


def _trained(tmp_path, name, **settings):
    from multidev.outputs import checkpoint as ckpt
    data = synthetic(n_train=24, n_test=4, shape=(1, 6, 6))
    path = tmp_path / f"{name}.npz"
    kwargs = dict(model=_dropout_net(), dataset=data, batch_size=8, dtype="float64", checkpoint=path, epochs=2)
    train(FakeEngine(), **{**kwargs, **settings})
    return ckpt.load(path)


def test_dropout_drops_the_same_units_on_any_device_count_and_micro_batching(tmp_path):
    import numpy as np
    _, one, _ = _trained(tmp_path, "one")
    for name, settings in {"two": dict(devices=2), "three": dict(devices=3),
                           "micro": dict(batch_size=4, accumulate=2)}.items():
        _, other, _ = _trained(tmp_path, name, **settings)
        assert all(np.allclose(other[n], one[n], rtol=1e-12, atol=1e-14) for n in one), name


def test_a_resumed_run_with_dropout_ends_as_the_uninterrupted_one(tmp_path):
    import numpy as np
    _, whole, _ = _trained(tmp_path, "whole")
    _trained(tmp_path, "half", epochs=1)
    spec, resumed, _ = _trained(tmp_path, "half", model=None, resume=tmp_path / "half.npz")  # its own model
    assert spec.graph == _dropout_net().graph().resolved(10)
    assert all(np.array_equal(resumed[n], whole[n]) for n in whole)


def test_dropout_changes_training():
    from multidev import nn
    data = synthetic(n_train=16, n_test=4, shape=(1, 6, 6))
    base = dict(dataset=data, batch_size=8, dtype="float64", epochs=1)
    kept = nn.Sequential(nn.Conv2d(3, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2), nn.Flatten(), nn.Dense())
    a = train(FakeEngine(), model=_dropout_net(), **base).epochs[0].loss
    b = train(FakeEngine(), model=kept, **base).epochs[0].loss
    assert a != b


def test_a_resume_without_model_reports_the_checkpoints_model(tmp_path):
    data = synthetic(n_train=16, n_test=4, shape=(1, 16, 16))
    train(FakeEngine(), model="lenet", dataset=data, epochs=1, batch_size=8, checkpoint=tmp_path / "c.npz")
    resumed = train(FakeEngine(), dataset=data, epochs=2, batch_size=8, resume=tmp_path / "c.npz")
    assert resumed.model == "lenet"


@pytest.mark.parametrize("native, precision, kind, warned", [
    (False, "bf16", "cpu", True),     # an AVX2 CPU: frameworks emulate bfloat16
    (True, "bf16", "cpu", False),     # AVX-512 BF16 or AMX
    (False, "fp32", "cpu", False),
    (False, "bf16", "gpu", False),
])
def test_bf16_on_a_cpu_that_emulates_it_is_one_warning(monkeypatch, native, precision, kind, warned):
    import warnings

    from multidev.training import run as run_module

    monkeypatch.setattr(run_module, "native_bf16", lambda: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_module.warn_emulated_bf16(precision, [Device(kind, 0)])
    said = [str(w.message) for w in caught if issubclass(w.category, run_module.EmulatedBfloat16Warning)]
    assert said == (["this CPU has no bfloat16 arithmetic (AVX-512 BF16 or AMX), so the frameworks emulate it and "
                     "--precision bf16 trains slower than fp32 here (torch's convolutions: 14 times, on an AVX2 "
                     "EPYC); use --precision fp32, or a GPU"] if warned else [])


class _GroupEngine:
    """A rank of a two-process job whose runtime agrees with everything; counts its leaves."""

    name, capabilities, left = "stub", frozenset({"multi_process"}), 0

    def join(self, group, local_rank) -> None:
        pass

    def leave(self) -> None:
        self.left += 1

    def all_sum(self, values):
        import numpy as np
        return np.full_like(values, np.max(values))  # every rank said what rank 0 said


@pytest.mark.parametrize("error, ends_at_once, leaves", [
    (OSError(28, "disk full"), False, 1),        # multidev.train in a user's process (Ray Train): the runtime is left
    (OSError(28, "disk full"), True, 0),         # a job's worker: it ends at once; leaving would wait for its peers
    (MultidevError("diverged"), True, 1),        # raised by every rank at the same step: they leave together
    (PeerLost("rank 1 is gone"), True, 0),       # the job is gone: leaving would wait for the dead
    (KeyboardInterrupt(), True, 1),              # a stop every rank makes at the same step
])
def test_a_rank_leaves_the_runtime_unless_leaving_would_wait_for_ever(monkeypatch, error, ends_at_once, leaves):
    from multidev.processes.group import Joined, ProcessGroup
    from multidev.settings.run import Settings
    from multidev.training import run

    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr(run, "run_here", fails)
    monkeypatch.setattr(run, "_ENDS_AT_ONCE", [True] if ends_at_once else [])
    engine = _GroupEngine()
    with pytest.raises(type(error)):
        run.run_in_group(engine, Joined(ProcessGroup(0, 2), 0), Settings(), None)
    assert engine.left == leaves


def test_the_bars_clock_runs_while_a_long_first_step_does(capsys):
    """A JAX step can compile for half a minute: the bar says what the engine is busy with and its clock goes on, so
    it does not read as a hang."""
    import re
    import time

    from multidev.engine import doing
    from multidev.testing.fake import FakeReplicas

    class SlowFirst(FakeReplicas):
        def queue_step(self, batch, lr):
            if not getattr(self, "warm", False):
                self.warm = True
                with doing("compiling train"):
                    time.sleep(2.6)
            return super().queue_step(batch, lr)

    class Engine(FakeEngine):
        def replicate(self, setup, state):
            return SlowFirst(setup, state, None)

    data = synthetic(n_train=16, n_test=4, shape=LENET.in_shape)
    train(Engine(), model="lenet", dataset=data, epochs=1, batch_size=8, progress=True)
    frames = [f for f in re.split(r"[\r\n]", capsys.readouterr().err) if f.startswith("epoch 1:   0%")]
    assert any("compiling train" in f for f in frames), frames  # the rest as wide as the terminal
    # still at 0%, the clock past the first second: it ran during the step (a loaded machine may skip a tick)
    assert {"[00:01<", "[00:02<"} & {m for f in frames for m in re.findall(r"\[00:0\d<", f)}, frames


def test_a_run_plans_its_cpu_devices_before_the_engines_first_other_call():
    """An engine whose framework fixes its CPU device count at start-up (JAX) learns the run's first."""
    calls = []

    class Planning(FakeEngine):
        def plan_cpu_devices(self, count):
            calls.append(("plan", count))

        def gpu_count(self):
            calls.append(("gpu_count",))
            return super().gpu_count()

    data = synthetic(n_train=16, n_test=4, shape=LENET.in_shape)
    train(Planning(), model="lenet", dataset=data, epochs=1, batch_size=8, devices="cpu:0,cpu:2", progress=False)
    assert calls[:2] == [("plan", 3), ("gpu_count",)], calls


def test_a_jobs_worker_plans_its_cpu_devices_before_joining_the_runtime():
    """Joining starts the framework (JAX): a worker that planned later kept the default count, and rounded its
    float32 sums otherwise than one process of the job's devices."""
    from multidev.processes.group import Joined, ProcessGroup
    from multidev.settings.run import Settings
    from multidev.training.run import run_in_group

    calls = []

    class Worker(FakeEngine):
        capabilities = FakeEngine.capabilities | {"multi_process"}

        def plan_cpu_devices(self, count):
            calls.append(("plan", count))

        def join(self, group, local_rank):
            calls.append(("join",))
            raise MultidevError("stop here")

        def leave(self):
            calls.append(("leave",))

    with pytest.raises(MultidevError, match="stop here"):
        run_in_group(Worker(), Joined(ProcessGroup(0, 2), 0), Settings(devices=2), None)
    assert calls[:2] == [("plan", 2), ("join",)], calls
