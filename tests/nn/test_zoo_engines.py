"""torchvision's classifiers on every engine: imported from ONNX, torch's own logits, and an epoch on 2 devices.

Why: ``test_torchvision_zoo.py`` shows the model language reads each network
exactly (the float64 reference against torch); this shows each engine builds
what was read: float32 logits within 1e-4 of torch's module (relative to the
largest logit, from the file's own weights), then one epoch of a small
synthetic set on 2 devices that moves the weights and reports a finite loss.
"""

import math

import numpy as np
import pytest

import multidev
from multidev.data import synthetic
from multidev.engines.protocol import Setup, replicate
from multidev.engines.registry import installed, load_backend
from multidev.outputs import checkpoint as ckpt
from multidev.rules.devices import resolve_devices
from multidev.rules.models import ModelSpec
from multidev.rules.split import cut, shard_sizes

pytest.importorskip("onnx", reason="the onnx package is not installed (pip install 'multidev[onnx]')")

ENGINES = [e for e in ("torch", "jax", "mxnet") if e in installed()]
#: name -> input size: 32 px where every stage still sees a pixel; AlexNet and VGG's adaptive pools need 224
SIZES = {"resnet18": 32, "mobilenet_v2": 32, "vit": 32, "squeezenet1_0": 32, "resnet50": 32, "densenet121": 32,
         "googlenet": 32, "mobilenet_v3_small": 32, "efficientnet_b0": 32, "regnet_y_400mf": 32,
         "shufflenet_v2_x0_5": 32, "convnext_tiny": 32, "swin_t": 32, "alexnet": 224, "vgg11": 224}


@pytest.fixture(scope="module")
def exported(exported_classifier):
    """name -> (4 images, torch's float32 logits of them, the ONNX file), made once per network for every engine."""
    import torch

    made = {}

    def get(name: str):
        if name not in made:
            size = SIZES[name]
            model, path = exported_classifier(name, size)
            x = np.random.default_rng(1).normal(0, 1, (4, 3, size, size)).astype(np.float32)
            with torch.no_grad():
                made[name] = (x, model(torch.from_numpy(x)).numpy(), path)
        return made[name]
    return get


#: what CI's slow run covers: residual, depthwise, channel shuffle, attention (squeeze-and-excitation's SiLU and
#: gate are the kit's layer cases); the rest run with `-m zoo` (JAX's 14 took 14 minutes on 2 cores, Zen 3)
CI = {"resnet18", "mobilenet_v2", "shufflenet_v2_x0_5", "vit"}


#: 8 images a device: at 2, EfficientNet-B0's and ShuffleNetV2's last stages (1x1 at 32 px) normalise two values a
#: channel, and even torch's float64 gradients reach 1e7; float32 runs then end where rounding takes them (JAX: NaN)
BATCH = 16


@pytest.mark.parametrize("engine, name", [pytest.param(e, n, marks=pytest.mark.slow if n in CI else pytest.mark.zoo)
                                          for n in SIZES for e in ENGINES])
def test_an_imported_classifier_gives_torchs_logits_and_trains_on_two_devices(exported, engine, name, tmp_path):
    x, want, path = exported(name)
    graph = multidev.nn.from_onnx(path)
    spec = ModelSpec(name, x.shape[1:], 10, graph)
    backend = load_backend(engine)
    sizes = shard_sizes(len(x), 2)
    devices = resolve_devices(devices=2, gpu_count=0, max_cpu=backend.max_cpu_devices())
    reps = replicate(backend, Setup(spec, tuple(devices)), spec.init(0))
    got = reps.predict(reps.place(cut(x, None, sizes)))
    gap = float(np.abs(got - want).max() / np.abs(want).max())
    assert gap <= 1e-4, f"{engine}'s float32 logits of torchvision's {name} are {gap:.1e} from torch's module"

    data = synthetic(n_train=2 * BATCH, n_test=4, shape=x.shape[1:], num_classes=10)
    result = multidev.train(backend=engine, devices=2, model=str(path), dataset=data, epochs=1, batch_size=BATCH,
                            lr=0.01, progress=False, checkpoint=tmp_path / "ck.npz")
    assert math.isfinite(result.epochs[-1].loss), f"{engine}: an epoch of {name} ended in loss {result.epochs}"
    _, trained, _ = ckpt.load(tmp_path / "ck.npz")
    moved = [k for k, v in spec.init(0).items() if not np.array_equal(v, trained[k])]
    assert len(moved) > len(trained) // 4, f"{engine}: an epoch of {name} moved only {moved}"
