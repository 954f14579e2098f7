"""The torch engine's GPU forms (multidev_torch.gpu): what the environment pins, and NHWC images computing what the
reference computes. The layout is tried on CPU devices here, pinned by MULTIDEV_TORCH_LAYOUT (CI has no GPU);
tests/test_gpu.py checks a GPU's step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import multidev
from multidev import nn, reference
from multidev.testing import FLOAT64_RTOL, batch
from multidev.rules.optimizers import Optimizer
from multidev.testing import assert_states_close
from multidev_torch import cpu_layout, gpu


def definition() -> nn.Model:
    x = nn.Input()
    h = nn.ReLU()(nn.BatchNorm()(nn.Conv2d(6, 3, padding=1, bias=False)(x)))
    h = nn.Residual(nn.Conv2d(6, 3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(), name="block")(h)
    h = nn.MaxPool2d(2)(h)
    return nn.Model(x, nn.Dense()(nn.Flatten()(h)))


SPEC = multidev.ModelSpec("nhwc", (2, 8, 8), 4, graph=definition().graph())
SIZES = (5, 3)


@pytest.mark.parametrize("value, want", [("benchmark", {"benchmark"}),
                                         ("channels_last+benchmark", {"benchmark", "channels_last"}),
                                         ("compile,cudagraphs", {"compile", "cudagraphs"}),
                                         ("none", set()), (" Benchmark , ", {"benchmark"})])
def test_the_environment_pins_the_forms(monkeypatch, value, want):
    monkeypatch.setenv(gpu.ENV, value)
    assert gpu.chosen("fp32", cuda=True) == want
    assert gpu.chosen("fp32", cuda=False) == frozenset(), "no GPU form applies on a CPU"
    assert gpu.ENV in gpu.describe()


def test_the_default_is_the_measured_one_per_precision(monkeypatch):
    monkeypatch.delenv(gpu.ENV, raising=False)
    for precision in ("fp32", "bf16"):
        assert gpu.chosen(precision, cuda=True) == gpu.DEFAULT[precision]
    assert "fp32:" in gpu.describe() and "bf16:" in gpu.describe()


def test_an_unknown_form_is_one_line(monkeypatch):
    monkeypatch.setenv(gpu.ENV, "benchmark,nhwc")
    with pytest.raises(multidev.MultidevError, match="names no form nhwc") as err:
        gpu.chosen("fp32", cuda=True)
    assert "\n" not in str(err.value) and "channels_last" in str(err.value)


@pytest.mark.parametrize("form", [pytest.param("compile", marks=pytest.mark.slow), "cudagraphs"])
def test_compiled_replicas_step_as_the_reference(monkeypatch, form):
    """``compile`` (Inductor's kernels, forward and backward: 20-40 s to compile here) and ``cudagraphs`` (traced
    by ``torch.compile``; a CPU device replays no graph, tests/test_gpu.py holds the replays), tried on a CPU
    device: two float64 updates and running statistics (mutated buffers) are the reference's, the first batch's
    shape compiled and the shorter second batch run by the replica itself."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(gpu, "chosen", lambda precision, cuda: frozenset({form}))
    counters.clear()
    x, y = batch(SPEC, sum(SIZES))
    setup = multidev.Setup(SPEC, tuple(multidev.resolve_devices(devices=1)), "local", "float64")
    reps = multidev.replicate(multidev.load_backend("torch"), setup, SPEC.init(2))
    want = SPEC.init(2)
    for rows in (slice(0, 5), slice(5, 8)):
        reps.train_step(reps.place(multidev.cut(x[rows], y[rows], (len(x[rows]),))), lr=0.1)
        want = reference.train_step(SPEC, want, x[rows], y[rows], 0.1, (len(x[rows]),), "local", np.float64)[0]
    assert reps._calls[0].shape == (5, 2, 8, 8), "the first training batch's shape is the compiled one"
    assert counters["stats"]["unique_graphs"] == 1, f"one graph traced, for one shape: {dict(counters['stats'])}"
    assert_states_close(reps.state(), want, rtol=FLOAT64_RTOL, promise=f"{form}: compiled update")


def test_cuda_graphs_with_micro_batches_are_one_line(monkeypatch):
    monkeypatch.setattr(gpu, "chosen", lambda precision, cuda: frozenset({"cudagraphs"}))
    setup = multidev.Setup(SPEC, tuple(multidev.resolve_devices(devices=1)), accumulate=2)
    with pytest.raises(multidev.MultidevError, match="leave cudagraphs out with --accumulate") as err:
        multidev.replicate(multidev.load_backend("torch"), setup, SPEC.init(2))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("batchnorm", ["local", "sync"])
def test_nhwc_images_step_as_the_reference(monkeypatch, batchnorm):
    """Under channels_last the engine's float64 gradients, update and running statistics are the reference's."""
    monkeypatch.setenv(cpu_layout.ENV, "nhwc")
    x, y = batch(SPEC, sum(SIZES))
    setup = multidev.Setup(SPEC, tuple(multidev.resolve_devices(devices=2)), batchnorm, "float64")
    reps = multidev.replicate(multidev.load_backend("torch"), setup, SPEC.init(2))
    placed = reps.place(multidev.cut(x, y, SIZES))
    assert all(s.x.is_contiguous(memory_format=torch.channels_last) and not s.x.is_contiguous() for s in placed)
    weight = reps.models[0].get_submodule("block.conv1").weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()

    got = reps.gradients(placed)
    want = reference.gradients(SPEC, SPEC.init(2), x, y, SIZES, batchnorm)
    assert_states_close(got, want, rtol=FLOAT64_RTOL, promise=f"NHWC gradients ({batchnorm} BatchNorm)")
    reps.train_step(placed, lr=0.1)
    after = reps.state()
    assert all(v.flags.c_contiguous for v in after.values()), "state leaves the engine in the canonical layout"
    want_state = reference.train_step(SPEC, SPEC.init(2), x, y, 0.1, SIZES, batchnorm, np.float64)[0]
    assert_states_close(after, want_state, rtol=FLOAT64_RTOL, promise=f"NHWC update ({batchnorm} BatchNorm)")


@pytest.mark.parametrize("optimizer", [Optimizer(momentum=0.9), Optimizer("adamw", betas=(0.8, 0.99), eps=1e-3)],
                         ids=["momentum", "adamw"])
def test_nhwc_optimizer_state_resumes_as_the_canonical_layout_does(monkeypatch, optimizer):
    """Two updates with the optimizer's state saved and loaded between them, NHWC against the canonical layout:
    the same float64 parameters, and the loaded slots in their parameters' layout."""
    x, y = batch(SPEC, 16)
    ends = {}
    for form in ("nhwc", "nchw"):
        monkeypatch.setenv(cpu_layout.ENV, form)
        setup = multidev.Setup(SPEC, tuple(multidev.resolve_devices(devices=2)), "sync", "float64",
                               optimizer=optimizer)
        reps = multidev.replicate(multidev.load_backend("torch"), setup, SPEC.init(2))
        reps.train_step(reps.place(multidev.cut(x[:8], y[:8], SIZES)), lr=0.1)
        resumed = multidev.replicate(multidev.load_backend("torch"), setup, reps.state())
        resumed.load_optimizer_state(reps.optimizer_state())
        weight = resumed.models[0].get_submodule("block.conv1").weight
        slot = next(iter(resumed.optimizers[0].state[weight].values()))
        assert slot.stride() == weight.stride(), f"{form}: a loaded slot is not in its parameter's layout"
        resumed.train_step(resumed.place(multidev.cut(x[8:], y[8:], SIZES)), lr=0.1)
        ends[form] = resumed.state()
    assert_states_close(ends["nhwc"], ends["nchw"], rtol=FLOAT64_RTOL,
                        promise=f"NHWC against NCHW, {optimizer.name} resumed between two updates")
