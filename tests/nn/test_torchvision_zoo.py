"""torchvision's classifiers, exported by torch's TorchScript exporter, read by nn.from_onnx.

Why: these are the networks users bring; each one within reach of the model
language must import and give torch's logits (float64 on both sides, within
1e-6 of the largest logit), and each one beyond it must say in one line
which node it cannot read. Built with ``weights=None, num_classes=10`` and
changed to show what an import could miss (``conftest.classifier``);
inputs of 32x32 (the smallest at which every stage of the 32x-downsampling
networks still sees a pixel of its own), and 224 for AlexNet and VGG, whose
adaptive pools need 6x6 and 7x7 maps.
"""

import copy
from collections import Counter

import numpy as np
import pytest

import multidev
from multidev import MultidevError, reference
from multidev.nn.onnx import from_onnx

pytest.importorskip("onnx", reason="the onnx package is not installed (pip install 'multidev[onnx]')")

FAST = {"resnet18", "squeezenet1_0", "mobilenet_v2", "vit"}
#: name -> (input size, counts of the layers that mark it)
READ = {"resnet18": (32, {"Add": 8}), "squeezenet1_0": (32, {"Concat": 8, "MaxPool2d": 3}),
        "mobilenet_v2": (32, {"ReLU6": 35, "Conv2d": 52}), "alexnet": (224, {"AvgPool2d": 1}),
        "vgg11": (224, {"MaxPool2d": 5}), "resnet50": (32, {"Add": 16}), "densenet121": (32, {"AvgPool2d": 3}),
        "googlenet": (32, {"Concat": 9, "MaxPool2d": 13}),
        "mobilenet_v3_small": (32, {"HardSwish": 19, "HardSigmoid": 9, "Mul": 9}),
        "efficientnet_b0": (32, {"SiLU": 49, "Sigmoid": 16, "Mul": 16}),
        "regnet_y_400mf": (32, {"Sigmoid": 16, "Mul": 16}),
        "vit": (32, {"MultiHeadAttention": 2, "ClassToken": 1, "PositionEmbedding": 1, "Slice": 1}),
        "shufflenet_v2_x0_5": (32, {"Reshape": 32, "Transpose": 16, "Slice": 26}),
        "convnext_tiny": (32, {"LayerNorm": 23, "Transpose": 46, "Conv2d": 40, "GELU": 18}),
        "swin_t": (32, {"WindowAttention": 12, "LayerNorm": 29, "GELU": 12})}
#: name -> (input size, the one line from_onnx refuses it with): Swin V2's attention biases come from an MLP of a
#: constant table of coordinates, which no layer of the model language computes
REFUSED = {
    "swin_v2_t": (32, "ONNX node '/features/features.1/features.1.0/attn/cpb_mlp/cpb_mlp.0/MatMul' (op MatMul) "
                      "takes the constant 'features.1.0.attn.relative_coords_table' as input 0: multidev.nn's layers "
                      "take computed values"),
}


def _speed(names):
    return [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", _speed(READ))
def test_a_classifier_imports_and_gives_torchs_logits(exported_classifier, name):
    import torch

    size, marks = READ[name]
    model, path = exported_classifier(name, size)
    graph = from_onnx(path)
    counts = Counter(type(n.layer).__name__ for n in graph.nodes)
    assert {k: counts[k] for k in marks} == marks
    spec = multidev.ModelSpec(name, (3, size, size), 10, graph=graph)
    x = np.random.default_rng(1).normal(size=(2, 3, size, size))
    with torch.no_grad():
        want = copy.deepcopy(model).double()(torch.from_numpy(x)).numpy()
    got = reference.predict(spec, spec.init(0), x)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


@pytest.mark.parametrize("name", _speed(REFUSED))
def test_a_classifier_beyond_the_model_language_is_one_line(exported_classifier, name):
    size, message = REFUSED[name]
    _, path = exported_classifier(name, size)
    with pytest.raises(MultidevError) as err:
        from_onnx(path)
    assert str(err.value) == message
