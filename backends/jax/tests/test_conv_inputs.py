"""Convolution inputs written once: the same numbers as the fused form, a different program, and the measured choice."""

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("jax")

import multidev  # noqa: E402
from multidev.testing import assert_states_close, assert_states_equal, batch  # noqa: E402
from multidev.testing.layers import masked  # noqa: E402

# The model: the README's (train_readme, conftest.py): convolutions after BatchNorm and ReLU, inside and after a
# residual block, and before Dropout


@pytest.fixture
def kept(monkeypatch, afresh):
    """The choice measured afresh, kept in a folder of this test's own, no compiled step reused; devices whole."""
    from multidev_jax.forms import CONV_INPUTS

    monkeypatch.setenv("MULTIDEV_JAX_PARTS", "whole")
    return afresh(CONV_INPUTS)


def _programs(reps) -> tuple[str, str]:
    """The train and evaluation steps' programs as XLA compiles them for an 8-row batch."""
    x, y = batch(reps.spec, 8)
    shards, _ = masked(reps.spec, x, y, multidev.shard_sizes(8, len(reps.mesh.devices.flat)), reps.dtype.name)
    placed = reps.place(shards)
    train = reps._steps.train.lower(reps._params, reps._opt_state, reps._stats, placed.x, placed.drops, placed.y,
                                    placed.device_sizes, reps.dtype.type(0.1), reps.dtype.type(8))
    evaluate = reps._steps.evaluate.lower(reps._params, reps._stats, placed.x, placed.y, placed.device_sizes)
    return _instructions(train.compile().as_text()), _instructions(evaluate.compile().as_text())


def _instructions(text: str) -> str:
    """A program's instructions without their metadata: newer JAX prints Python stack frames that differ by caller."""
    lines = (line for line in text.splitlines() if re.match(r"\s*(ROOT )?%\S+ = ", line))
    return "\n".join(re.sub(r", metadata=\{[^}]*\}", "", line) for line in lines)


def test_the_input_passes_through_unchanged_and_so_does_its_gradient():
    import jax
    import jax.numpy as jnp
    from multidev_jax.conv import computed_once

    x = jnp.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(computed_once(x), x)
    np.testing.assert_array_equal(jax.grad(lambda a: jnp.sum(computed_once(a) * a))(x), 2 * x)
    assert "gather" in jax.jit(computed_once).lower(x).as_text(), "an identity XLA keeps (a gather), not a no-op"


@pytest.mark.parametrize("devices, batchnorm", [(1, "local"), (2, "local"), (2, "sync")])
def test_inputs_written_once_train_as_the_fused_form(monkeypatch, train_readme, devices, batchnorm):
    """float64, so that the two programs' only difference, the gather, must change nothing at all."""
    monkeypatch.setenv("MULTIDEV_JAX_CONV_INPUTS", "fused")
    fused_reps, fused, *_ = train_readme(devices, batchnorm)
    monkeypatch.setenv("MULTIDEV_JAX_CONV_INPUTS", "once")
    once_reps, once, *_ = train_readme(devices, batchnorm)
    assert (fused_reps.inputs, once_reps.inputs) == ("fused", "once")
    assert_states_close(once, fused, rtol=1e-12, promise="a convolution's input written once is the same input")


def test_the_once_form_is_another_program_in_training_only(monkeypatch, train_readme):
    """The test above could not fail if the form never reached the program: it does, in the train step alone."""
    programs = {}
    for form in ("fused", "once"):
        monkeypatch.setenv("MULTIDEV_JAX_CONV_INPUTS", form)
        programs[form] = _programs(train_readme(1, dtype="float32", steps=0)[0])
    convolutions = programs["fused"][1].count(" convolution(")  # inference: the forward pass's alone
    gathers = {form: train.count(" gather(") for form, (train, _) in programs.items()}  # the loss has its own
    assert gathers["once"] - gathers["fused"] == convolutions > 0, (gathers, convolutions)
    assert programs["once"][1] == programs["fused"][1], "inference reads each input once anyway: no gather"


def test_a_run_measures_once_keeps_the_choice_and_trains_as_the_chosen_form_alone(kept, tmp_path, monkeypatch,
                                                                                   train_readme):
    reps, measured, *_ = train_readme(1, dtype="float32")
    saved = json.loads((tmp_path / "conv_inputs.json").read_text())
    assert list(saved) == kept.kept.measured and len(saved) == 1, saved
    chosen = saved[kept.kept.measured[0]]
    assert reps.inputs == chosen == reps.forms.conv_inputs and reps.compile_seconds > 0
    assert f"{chosen} for 1" in kept.note()
    # the timed steps ran on copies: the run equals one that only ever ran the chosen form
    monkeypatch.setenv(kept.env, chosen)
    assert_states_equal([measured, train_readme(1, dtype="float32")[1]],
                        promise="measuring the convolutions' inputs leaves the run as it was")
    # a later run reads the file instead of measuring: the other form, saved, is what it takes
    monkeypatch.delenv(kept.env)
    other = "fused" if chosen == "once" else "once"
    (tmp_path / "conv_inputs.json").write_text(json.dumps({kept.kept.measured[0]: other}))
    kept.kept.forget()
    again = train_readme(1, dtype="float32")[0]
    assert again.inputs == other and len(kept.kept.measured) == 1, "measured again"


def test_pins_gpus_models_without_convolutions_and_jobs_time_nothing(kept, monkeypatch):
    import jax
    from multidev_jax.forms.conv_inputs import settled

    from multidev.testing import LENET

    mlp = multidev.ModelSpec("mlp", (16,), 3)
    cpus = jax.devices("cpu")[:2]
    assert settled(LENET, cpus, 1) is None, "one process on CPUs: timed"
    assert settled(LENET, [SimpleNamespace(platform="gpu")], 1) == "fused"
    assert settled(mlp, cpus, 1) == "fused", "no convolution: the two forms are one program"
    monkeypatch.setenv(kept.env, "fused")
    assert settled(LENET, cpus, 1) == "fused" and "MULTIDEV_JAX_CONV_INPUTS=fused" in kept.note()


@pytest.mark.parametrize("pin, published, want", [("", "", "once"), ("fused", "", "fused"), ("", "fused", "fused")])
def test_a_jobs_processes_take_rank_0s_form(kept, job, monkeypatch, pin, published, want):
    """Rank 0 publishes its pin, else the default; the others take what it published, whatever their own pin."""
    import jax
    from multidev_jax.forms.conv_inputs import settled

    from multidev.testing import LENET

    cpus = jax.devices("cpu")[:2]
    monkeypatch.setenv(kept.env, pin)
    if published:  # this process as rank 1: rank 0 published already
        monkeypatch.setattr(jax, "process_index", lambda: 1)
        job.values["multidev/conv_inputs.json/job"] = published
        monkeypatch.setenv(kept.env, "once")  # rank 1's own pin does not count
    else:
        monkeypatch.setattr(jax, "process_index", lambda: 0)
    assert settled(LENET, cpus, 2) == want
    assert job.values["multidev/conv_inputs.json/job"] == want
