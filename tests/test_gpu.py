"""GPU checks: run where an engine sees a GPU, skipped with the reason elsewhere (CI has none)."""

import pytest

import multidev
from multidev.testing._helpers import LENET, RESNET, assert_states_close, batch

# TF32 and other GPU convolution algorithms round differently from the CPU.
GPU_RTOL = 1e-2


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
    states = []
    for device in ("gpu:0", "cpu:0"):
        reps = engine.replicate(spec, spec.init(0), [multidev.Device.parse(device)])
        reps.train_step(reps.split_batch(x, y, [12]), lr=0.1)
        states.append(reps.state())
    assert_states_close(states[0], states[1], rtol=GPU_RTOL, promise=f"{name}: one SGD step on gpu:0 and cpu:0")


@pytest.mark.skipif(not ENGINES, reason="no installed engine sees a GPU on this machine")
@pytest.mark.parametrize("name", ENGINES)
def test_gpus_flag_uses_the_gpu(name):
    result = multidev.train(name, gpus=1, model="lenet", dataset=multidev.data.synthetic(), epochs=1)
    assert result.devices == ["gpu:0"] and result.test_total == 128
