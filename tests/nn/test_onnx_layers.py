"""ONNX in and out for the model language's window, normalisation and activation layers.

Why: torchvision's classifiers (and most exported CNNs) are written with
grouped and dilated convolutions, padded and ceil_mode pools, ReLU6,
Hardswish, SiLU, squeeze-and-excitation gates: a torch export of each must
read as the layer that computes torch's logits, and each layer written by
``to_onnx`` must give multidev's logits in onnxruntime and read back as itself.
"""

import re

import numpy as np
import pytest

import multidev
from multidev import nn, reference
from multidev.nn import onnx as nn_onnx
from multidev.nn.onnx import SUPPORTED, from_onnx, to_onnx

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (pip install 'multidev[onnx]')")
helper, TensorProto = onnx.helper, onnx.TensorProto


def _torch():
    return pytest.importorskip("torch", reason="torch is not installed: no network to export")


def _ort():
    return pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: nothing runs the ONNX files")


def _torch_net(torch):
    """Every new layer as torchvision writes it: a MobileNet/EfficientNet-like stem, block and head."""
    t = torch.nn

    class SE(t.Module):
        def __init__(self, c: int, gate) -> None:
            super().__init__()
            self.pool, self.fc1, self.act = t.AdaptiveAvgPool2d(1), t.Conv2d(c, 4, 1), t.SiLU()
            self.fc2, self.gate = t.Conv2d(4, c, 1), gate

        def forward(self, x):
            return self.gate(self.fc2(self.act(self.fc1(self.pool(x))))) * x

    class Net(t.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = t.Conv2d(3, 8, 3, stride=2, padding=(1, 2), bias=False)
            self.bn = t.BatchNorm2d(8, eps=1e-3, momentum=0.01)
            self.relu6 = t.ReLU6()
            self.dw = t.Conv2d(8, 8, 3, padding="same", groups=8, dilation=2)
            self.pw = t.Conv2d(8, 16, 1)
            self.leaky = t.LeakyReLU(0.2)
            self.pool = t.MaxPool2d(3, 2, padding=1, ceil_mode=True)
            self.se1, self.se2 = SE(16, t.Hardsigmoid()), SE(16, t.Sigmoid())
            self.hswish = t.Hardswish()
            self.avg = t.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False)
            self.fc1, self.gelu = t.Linear(16, 12), t.GELU(approximate="tanh")
            self.norm, self.fc2 = t.LayerNorm(12, eps=1e-3), t.Linear(12, 5)

        def forward(self, x):
            y = self.leaky(self.pw(self.relu6(self.dw(self.relu6(self.bn(self.stem(x)))))))
            y = self.avg(self.hswish(self.se2(self.se1(self.pool(y)))))
            y = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)
            return self.fc2(self.norm(self.gelu(self.fc1(y))))

    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.normal_(0, 0.3)
        net.bn.running_mean.normal_(0, 0.3)
        net.bn.running_var.uniform_(0.5, 1.5)
    return net.eval()


@pytest.mark.parametrize("opset", [17, 20])
def test_torchvisions_layers_read_as_the_new_layers(tmp_path, torch_export, opset):
    """Below opset 20 GELU's tanh form is 9 nodes; x * Sigmoid(x) is SiLU; a pooled value that a Conv reads stays
    (N, C, 1, 1), one that a Flatten reads is (N, C)."""
    torch = _torch()
    net, in_shape = _torch_net(torch), (3, 11, 13)
    torch_export(net, tmp_path / "net.onnx", in_shape, opset)
    graph = from_onnx(tmp_path / "net.onnx")
    layers = {n.name: n.layer for n in graph.nodes}
    assert layers["stem"] == nn.Conv2d(8, 3, stride=2, padding=(1, 2), bias=False)
    assert layers["bn"] == nn.BatchNorm(eps=1e-3, momentum=0.01)
    assert layers["dw"] == nn.Conv2d(8, 3, padding="same", groups=8, dilation=2)
    assert layers["leaky"] == nn.LeakyReLU(0.2)
    assert layers["pool"] == nn.MaxPool2d(3, 2, padding=1, ceil_mode=True)
    assert layers["avg"] == nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False)
    assert layers["se1.pool"] == nn.GlobalAvgPool(keepdims=True) and layers["gap1"] == nn.GlobalAvgPool()
    assert layers["se1.act"] == nn.SiLU() and layers["se1.gate"] == nn.HardSigmoid()
    assert layers["se2.gate"] == nn.Sigmoid() and layers["hswish"] == nn.HardSwish()
    assert [n.inputs for n in graph.nodes if n.name == "se1.mul1"] == [("se1.gate", "pool")]
    assert layers["gelu"] == nn.GELU(approximate="tanh") and layers["norm"] == nn.LayerNorm(eps=1e-3)
    assert sum(isinstance(layer, nn.ReLU6) for layer in layers.values()) == 2
    spec = multidev.ModelSpec("net", in_shape, 5, graph=graph)
    x = np.random.default_rng(1).normal(size=(4, *in_shape))
    with torch.no_grad():
        want = net.double()(torch.from_numpy(x)).numpy()
    got = reference.predict(spec, spec.init(0), x)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def test_hardswish_below_opset_14_and_relu6_below_opset_11(tmp_path, torch_export):
    """torch writes Hardswish as x * HardSigmoid(x) at opset 13; ReLU6's Clip took min and max as attributes
    before opset 11; a Clip with no max is a ReLU."""
    torch = _torch()
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Hardswish(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 4 * 4, 3)).eval()
    torch_export(net, tmp_path / "hswish.onnx", (3, 6, 6), 13)
    assert [type(n.layer) for n in from_onnx(tmp_path / "hswish.onnx").nodes] == [nn.Conv2d, nn.HardSwish,
                                                                                    nn.Flatten, nn.Dense]
    for opset, clip in ((9, helper.make_node("Clip", ["input"], ["c"], name="c", min=0.0, max=6.0)),
                        (17, helper.make_node("Clip", ["input", "zero"], ["c"], name="c"))):
        nodes = [clip, helper.make_node("MatMul", ["c", "w"], ["y"], name="fc")]
        inits = [onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
                 onnx.numpy_helper.from_array(np.zeros((), np.float32), "zero")]
        path = _write(tmp_path, nodes, inits, (4,), opset, 1)
        assert from_onnx(path).nodes[0].layer == (nn.ReLU6() if opset == 9 else nn.ReLU())


def _write(tmp_path, nodes, inits, in_dims, opset, out_rank):
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *in_dims])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *(f"d{i}" for i in range(out_rank))])
    model = helper.make_model(helper.make_graph(list(nodes), "g", [x], [y], list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    path = tmp_path / f"m{len(list(tmp_path.iterdir()))}.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("size, padding", [(9, "same"), (7, "same"), (8, None)])
def test_same_lower_reads_as_same_where_its_padding_is_symmetric(tmp_path, size, padding):
    """SAME_LOWER puts the odd row on top: at stride 2, a 7x7 input pads 1 on each side (as SAME_UPPER), an 8x8
    one 1 on top alone (refused); at stride 1 a 3x3 kernel always pads 1 on each side."""
    stride = 1 if size == 9 else 2
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], name="c", strides=[stride] * 2, auto_pad="SAME_LOWER"),
             helper.make_node("ReduceMean", ["c"], ["y"], name="mean", axes=[2, 3], keepdims=0)]
    path = _write(tmp_path, nodes, [onnx.numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")],
                  (3, size, size), 17, 1)
    if padding is None:
        with pytest.raises(multidev.MultidevError, match="has auto_pad SAME_LOWER, which pads 8x8 inputs by"):
            from_onnx(path)
        return
    graph = from_onnx(path)
    assert [n.layer for n in graph.nodes] == [nn.Conv2d(2, 3, stride=stride, padding="same", bias=False),
                                              nn.GlobalAvgPool()]


def _every_layer() -> nn.Model:
    """Each new layer once, with its hyperparameters away from their defaults."""
    x = nn.Input()
    y = nn.Conv2d(8, 3, stride=2, padding=(0, 1, 2, 1), name="stem")(x)
    y = nn.ReLU6()(nn.BatchNorm(eps=1e-3, momentum=0.01)(y))
    y = nn.Conv2d(8, 3, padding=2, groups=4, dilation=2, bias=False)(nn.Conv2d(8, 2, padding="same")(y))
    y = nn.LeakyReLU(0.2)(nn.MaxPool2d(3, 2, padding=1, ceil_mode=True)(y))
    gate = nn.HardSigmoid()(nn.Conv2d(8, 1)(nn.SiLU()(nn.Conv2d(4, 1)(nn.GlobalAvgPool(keepdims=True)(y)))))
    y = nn.HardSwish()(nn.Mul()(y, gate))
    y = nn.Div()(nn.Sub()(y, nn.Conv2d(8, 1)(y)), nn.Sigmoid()(nn.Conv2d(1, 1)(y)))  # (8, H, W) / (1, H, W)
    y = nn.Pad(1, 1, 0, value=0.25)(nn.Pad(2, 0, 2)(y))
    y = nn.Sub()(y, nn.Mean((0,), keepdims=True)(y))  # each pixel less its channels' mean
    y = nn.AvgPool2d(3, 2, padding=(1, 0), ceil_mode=True, count_include_pad=False)(y)
    y = nn.GELU(approximate="tanh")(nn.LayerNorm(eps=1e-3)(nn.Dense(12)(nn.Flatten()(y))))
    return nn.Model(x, nn.Dense()(nn.Sigmoid()(y)))


def _random_state(spec) -> dict:
    rng = np.random.default_rng(7)
    state = spec.init(0)
    for p in spec.params():
        if p.role in ("gamma", "var"):
            state[p.name] = rng.uniform(0.5, 1.5, p.shape).astype(np.float32)
        elif p.role in ("beta", "mean", "bias"):
            state[p.name] = rng.normal(0, 0.3, p.shape).astype(np.float32)
    return state


@pytest.mark.parametrize("opset", [17, 20])
def test_every_new_layer_written_runs_in_onnxruntime_and_reads_back(tmp_path, opset):
    ort = _ort()
    in_shape = (3, 13, 11)
    spec = multidev.ModelSpec("every", in_shape, 10, graph=_every_layer().graph())
    state = _random_state(spec)
    path = to_onnx(spec.graph, state, in_shape, tmp_path / "every.onnx", opset=opset)
    x = np.random.default_rng(2).normal(size=(3, *in_shape))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"input": x.astype(np.float32)})[0]
    np.testing.assert_allclose(logits, reference.predict(spec, state, x), rtol=1e-5, atol=1e-5)
    back = from_onnx(path)
    assert back == spec.graph
    for name, value in back.weights.items():
        np.testing.assert_array_equal(value, state[name])


@pytest.mark.parametrize("layer, in_shape, back", [
    (nn.AvgPool2d(3, 2, padding=1, ceil_mode=True), (2, 7, 8), None),
    (nn.AvgPool2d(2, padding=1, ceil_mode=True, count_include_pad=False), (2, 6, 6), None),
    (nn.MaxPool2d(2, padding="same", ceil_mode=True), (2, 7, 7), None),
    (nn.AvgPool2d(2, padding="same"), (2, 7, 7), None),
    (nn.Conv2d(3, 2, stride=2, padding="same"), (2, 9, 9), None),
    (nn.Conv2d(3, 4, padding="same", dilation=2), (2, 9, 9), nn.Conv2d(3, 4, padding=3, dilation=2)),
])
def test_windows_written_give_multidevs_logits_in_onnxruntime(tmp_path, layer, in_shape, back):
    """Padding on each side, "same" (auto_pad SAME_UPPER) and ceil_mode as onnxruntime computes them; a dilated
    "same" is written as its pads at the file's size, as onnxruntime runs no dilation with auto_pad."""
    ort = _ort()
    graph = nn.Sequential(layer, nn.Flatten(), nn.Dense(3)).graph()
    spec = multidev.ModelSpec("w", in_shape, 3, graph=graph)
    state = spec.init(0)
    path = to_onnx(graph, state, in_shape, tmp_path / "w.onnx")
    x = np.random.default_rng(0).normal(size=(2, *in_shape))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"input": x.astype(np.float32)})[0]
    np.testing.assert_allclose(logits, reference.predict(spec, state, x), rtol=1e-5, atol=1e-5)
    assert from_onnx(path).nodes[0].layer == (back or layer)


def test_hardswish_written_below_opset_14_reads_back(tmp_path):
    """HardSwish is an ONNX op from opset 14: at 13 it is written as x * HardSigmoid(x), and read back as one."""
    graph = nn.Sequential(nn.Conv2d(4, 3), nn.HardSwish(), nn.GlobalAvgPool(), nn.Dense(3)).graph()
    spec = multidev.ModelSpec("h", (3, 5, 5), 3, graph=graph)
    path = to_onnx(graph, spec.init(0), (3, 5, 5), tmp_path / "h.onnx", opset=13)
    assert {n.op_type for n in onnx.load(path).graph.node} >= {"HardSigmoid", "Mul"}
    assert from_onnx(path) == graph


def test_supported_names_every_registered_reader():
    """SUPPORTED, which an unsupported op's error lists, is derived from the readers registered."""
    assert all(re.search(rf"(^|, ){op}\b", SUPPORTED) for op in nn_onnx.base.READERS)
    assert {"Clip", "HardSwish", "LeakyRelu", "Mul", "ReduceMean"} <= set(nn_onnx.base.READERS)
