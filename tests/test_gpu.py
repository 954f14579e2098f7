"""GPU checks: run where an engine sees a GPU, skipped with the reason elsewhere (CI has none)."""

import pytest

import multidev
from multidev.testing import CROSS_ENGINE_RTOL, LENET, RESNET, batch, update_apart
from multidev.testing.recipes import BF16_STEP_RTOL

# The whole SGD update as one vector, GPU against CPU. Engines compute float32 in full float32 on
# the GPU (measured on an H100: 8e-7 LeNet, 4e-6 ResNet-18, torch and JAX alike); with cuDNN's
# default TF32 the torch engine was off by 1.3e-2 and 6.2e-2, which this bound catches.
GPU_RTOL = CROSS_ENGINE_RTOL


def gpu_engines():
    found = []
    for name in multidev.installed_backends():
        try:
            engine = multidev.load_backend(name)
        except multidev.MultidevError:
            continue
        if "gpu" in engine.capabilities and engine.gpu_count() > 0:
            found.append(name)
    return found


ENGINES = gpu_engines()


@pytest.mark.skipif(not ENGINES, reason="no installed engine sees a GPU on this machine")
@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize("spec", [LENET, RESNET], ids=["lenet", "resnet18"])
def test_gpu_step_matches_cpu(name, spec):
    engine = multidev.load_backend(name)
    x, y = batch(spec, 12)
    start = spec.init(0)
    after = []
    for device in ("gpu:0", "cpu:0"):
        reps = multidev.replicate(engine, multidev.Setup(spec, [multidev.Device.parse(device)]), start)
        reps.train_step(reps.place(multidev.cut(x, y, [12])), lr=0.1)
        after.append(reps.state())
    err = update_apart(spec, start, *after)
    assert err <= GPU_RTOL, f"{name}: the SGD update on gpu:0 differs from cpu:0's by {err:.1e} (relative norm)"


@pytest.mark.skipif(not ENGINES, reason="no installed engine sees a GPU on this machine")
@pytest.mark.parametrize("name", ENGINES)
def test_gpus_flag_uses_the_gpu(name):
    result = multidev.train(name, gpus=1, model="lenet", dataset=multidev.data.synthetic(), epochs=1)
    assert result.devices == ["gpu:0"] and result.test_total == 128


@pytest.mark.skipif(not ENGINES, reason="no installed engine sees a GPU on this machine")
@pytest.mark.parametrize("name", ENGINES)
def test_gpu_bf16_step_is_near_the_float32_one(name):
    """bf16 on the GPU (the torch engine's NHWC images too) moves the weights as float32 on the CPU does, within
    what bfloat16 costs one update (BF16_STEP_RTOL was measured on LeNet)."""
    engine = multidev.load_backend(name)
    x, y = batch(LENET, 12)
    start = LENET.init(0)
    after = []
    for device, precision in (("gpu:0", "bf16"), ("cpu:0", "fp32")):
        setup = multidev.Setup(LENET, [multidev.Device.parse(device)], precision=precision)
        reps = multidev.replicate(engine, setup, start)
        reps.train_step(reps.place(multidev.cut(x, y, [12])), lr=0.1)
        after.append(reps.state())
    err = update_apart(LENET, start, *after)
    assert err <= BF16_STEP_RTOL, f"{name}: a bf16 update on gpu:0 is {err:.2f} of its size from float32's on cpu:0"


@pytest.mark.skipif("torch" not in ENGINES, reason="the torch engine sees no GPU on this machine")
def test_torch_cuda_graph_replays_step_as_its_eager_kernels(monkeypatch, forms="channels_last,cudagraphs"):
    """Each update replayed as CUDA graphs (recorded at the second step, replayed from the third; the last batch
    shorter, a shape run eagerly) is the update the eager kernels make from the same weights, and no step fell
    back to eager kernels.

    Both runs start every step from the eager run's weights: on an H200 (2026-11-29) two runs left to go their
    own ways on steps of 12 rows parted from the third step on (relative 4e-3, then 8e-2 and 0.18), while the
    book's job trained on digits for 4 epochs to the same losses in either form; a step's own difference is what
    says whether a replay computes the step."""
    from torch._dynamo.utils import counters

    engine = multidev.load_backend("torch")
    x, y = batch(RESNET, 56)
    counters.clear()
    runs = []
    for pinned in (forms, "channels_last"):
        monkeypatch.setenv("MULTIDEV_TORCH_GPU_FORMS", pinned)
        runs.append(multidev.replicate(engine, multidev.Setup(RESNET, [multidev.Device.parse("gpu:0")]),
                                       RESNET.init(0)))
    errors = []
    for rows in (slice(0, 12), slice(12, 24), slice(24, 36), slice(36, 48), slice(48, 56)):
        start = runs[1].state()
        runs[0].load_state(start)  # copied into the same tensors: the graphs' addresses stay
        for reps in runs:
            reps.train_step(reps.place(multidev.cut(x[rows], y[rows], [len(x[rows])])), lr=0.1)
        errors.append(update_apart(RESNET, start, *(reps.state() for reps in runs)))
    assert not counters["inductor"]["cudagraph_skips"], f"a step ran eagerly: {dict(counters['inductor'])}"
    assert max(errors) <= GPU_RTOL, f"{forms}: updates differ from the eager kernels' by {errors} (step by step)"
