import numpy as np
import pytest

from multidev import ModelSpec, MultidevError


def test_resnet18_layout():
    spec = ModelSpec("resnet18", (1, 28, 28), 10)
    params = {p.name: p.shape for p in spec.params()}
    assert params["stem.conv.weight"] == (64, 1, 3, 3)
    assert params["stage2.block1.proj.weight"] == (128, 64, 1, 1)
    assert "stage1.block1.proj.weight" not in params  # no projection where shapes match
    assert params["stage4.block2.conv2.weight"] == (512, 512, 3, 3)
    assert params["fc.weight"] == (10, 512)
    trainable = sum(int(np.prod(s)) for n, s in params.items() if not n.endswith(("running_mean", "running_var")))
    assert 11_100_000 < trainable < 11_200_000  # ResNet-18 size


def test_lenet_layout_follows_image_size():
    spec = ModelSpec("lenet", (1, 28, 28), 10)
    assert {p.name: p.shape for p in spec.params()}["fc1.weight"] == (128, 800)
    # on 8x8 images the second convolution's window outgrows its input: one line naming that layer
    with pytest.raises(MultidevError, match=r"^Conv2d 'conv2': its 5x5 window is larger than its 3x3 input"):
        ModelSpec("lenet", (1, 8, 8), 10)


def test_init_is_a_function_of_the_seed():
    spec = ModelSpec("lenet", (1, 16, 16), 10)
    a, b, c = spec.init(1), spec.init(1), spec.init(2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["conv1.weight"], c["conv1.weight"])
    assert all(v.dtype == np.float32 for v in a.values())


def test_unknown_model():
    with pytest.raises(MultidevError, match="unknown model"):
        ModelSpec("vgg", (1, 8, 8), 10)
