"""ONNX in and out: a torch export read by from_onnx computes torch's logits; multidev's networks survive a round trip.

Why: ``--model net.onnx`` trains a network from another framework on every
engine, from its own weights, and ``multidev export --onnx`` serves a trained
one anywhere; both must be the same function, and whatever multidev cannot
express must be one line naming the ONNX node.
"""

import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import multidev
from multidev import MultidevError, nn, reference
from multidev.nn.onnx import from_onnx, to_onnx

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (pip install 'multidev[onnx]')")
helper, TensorProto = onnx.helper, onnx.TensorProto


def _ort():
    return pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: nothing runs the ONNX files")


def _torch():
    return pytest.importorskip("torch", reason="torch is not installed: no network to export")


def _torch_net(torch):
    """Conv, BatchNorm, ReLU, a residual add, max pooling, Flatten, Linear, Dropout, GELU; random statistics."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(8)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.pool = torch.nn.MaxPool2d(2)
            self.fc1 = torch.nn.Linear(8 * 4 * 4, 16)
            self.drop = torch.nn.Dropout(0.3)
            self.act = torch.nn.GELU()
            self.fc2 = torch.nn.Linear(16, 5)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.pool(y + self.conv2(y))
            return self.fc2(self.act(self.drop(self.fc1(torch.flatten(y, 1)))))

    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        net.bn1.weight.uniform_(0.5, 1.5)
        net.bn1.bias.normal_(0, 0.3)
        net.bn1.running_mean.normal_(0, 0.3)
        net.bn1.running_var.uniform_(0.5, 1.5)
    return net


@pytest.mark.parametrize("opset, training", [(17, False), (17, True), (20, False)])
def test_a_torch_export_computes_torchs_logits(tmp_path, torch_export, opset, training):
    """Below opset 20 torch writes GELU as Div/Erf/Add/Mul/Mul; in training mode BatchNorm has extra outputs and
    training_mode 1, and Dropout stays in the file (an inference export leaves it out).

    The weights are float32; both sides compute in float64, so they agree far closer than 1e-5.
    """
    torch = _torch()
    net = _torch_net(torch).train(training)
    path = torch_export(net, tmp_path / "net.onnx", (3, 8, 8), opset, training=training)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = from_onnx(path)
    said = [str(w.message) for w in caught]  # a training-mode BatchNormalization reads as BatchNorm, said in one line
    assert said == ["ONNX node '/bn1/BatchNormalization' (op BatchNormalization) has training_mode 1 (exported in "
                    "training mode): multidev.nn reads it as BatchNorm, which uses the batch's statistics in training "
                    "and the running ones in inference"] * training
    names = [n.name for n in graph.nodes]  # torch leaves Dropout out of an inference export
    assert names == ["conv1", "bn1", "relu1", "conv2", "add1", "pool", "flatten1", "fc1"] + ["drop"] * training \
        + ["act", "fc2"]
    assert graph.source == str(path) and (not training or graph.nodes[8].layer == nn.Dropout(0.3))
    spec = multidev.ModelSpec("net", (3, 8, 8), 5, graph=graph)
    x = np.random.default_rng(1).normal(size=(4, 3, 8, 8))
    with torch.no_grad():
        want = net.eval().double()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(reference.predict(spec, spec.init(0), x), want, rtol=0, atol=1e-5)


def test_torchs_view_linear_without_bias_and_features(tmp_path):
    """x.view(x.size(0), -1) (Shape, Gather, Unsqueeze, Concat, Reshape), Linear(bias=False) (Transpose, MatMul)."""
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(12, 6, bias=False)
            self.bn = torch.nn.BatchNorm1d(6)
            self.norm = torch.nn.LayerNorm(12)
            self.out = torch.nn.Linear(12, 3)

        def forward(self, x):
            a = torch.tanh(self.bn(self.fc(x.view(x.size(0), -1))))
            return self.out(self.norm(torch.cat([a, torch.sigmoid(a)], 1)))

    torch.manual_seed(0)
    net = Net().eval()
    path = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(2, 3, 2, 2), str(path), dynamo=False, do_constant_folding=False,
                          opset_version=17, dynamic_axes={"x": {0: "N"}}, input_names=["x"])
    graph = from_onnx(path)
    assert [n.name for n in graph.nodes] == ["flatten1", "fc", "bn", "tanh1", "sigmoid1", "concat1", "norm", "out"]
    spec = multidev.ModelSpec("net", (3, 2, 2), 3, graph=graph)
    x = np.random.default_rng(1).normal(size=(4, 3, 2, 2))
    with torch.no_grad():
        want = net.double()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(reference.predict(spec, spec.init(0), x), want, rtol=0, atol=1e-5)


def _custom() -> nn.Model:
    """Every other layer: LayerNorm on images and on features, GELU, Tanh, Sigmoid, Concat, a 3-way Add."""
    x = nn.Input()
    a = nn.Conv2d(4, 3, padding=1, name="a")(x)
    b = nn.Tanh()(nn.Conv2d(2, 1, stride=1, bias=False, name="b")(x))
    y = nn.GELU()(nn.LayerNorm()(nn.Concat()(a, b)))
    y = nn.AvgPool2d(3, stride=2)(nn.Add()(y, nn.Conv2d(6, 1)(x), nn.Sigmoid()(y)))
    z = nn.LayerNorm()(nn.Dense(12, bias=False)(nn.Flatten()(y)))
    return nn.Model(x, nn.Dense()(nn.GELU()(z)))


def _random_state(spec) -> dict:
    """The seed's weights with BatchNorm and LayerNorm values that are not the identity."""
    rng = np.random.default_rng(7)
    state = spec.init(0)
    for p in spec.params():
        if p.role in ("gamma", "var"):
            state[p.name] = rng.uniform(0.5, 1.5, p.shape).astype(np.float32)
        elif p.role in ("beta", "mean", "bias"):
            state[p.name] = rng.normal(0, 0.3, p.shape).astype(np.float32)
    return state


@pytest.mark.parametrize("model, in_shape, opset", [("convnet", (3, 8, 8), 17), ("lenet", (1, 16, 16), 17),
                                                    ("custom", (3, 9, 9), 17), ("custom", (3, 9, 9), 20)])
def test_round_trip_runs_in_onnxruntime_and_reads_back(tmp_path, model, in_shape, opset):
    ort = _ort()
    spec = multidev.ModelSpec(model, in_shape, 10, graph=_custom().graph() if model == "custom" else None)
    state = _random_state(spec)
    path = tmp_path / "out.onnx"
    assert to_onnx(spec.graph, state, spec.in_shape, path, opset=opset) == str(path)
    x = np.random.default_rng(2).normal(size=(3, *in_shape))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"input": x.astype(np.float32)})[0]
    np.testing.assert_allclose(logits, reference.predict(spec, state, x), rtol=1e-5, atol=1e-5)
    back = from_onnx(path)
    assert back == spec.graph  # names, layers and wiring
    assert list(back.weights) == [p.name for p in spec.params()]
    for name, value in back.weights.items():
        np.testing.assert_array_equal(value, state[name])


def _write(tmp_path, nodes, inits=(), in_dims=(4,), opset=17, out_rank=None):
    """A one-input, one-output model built with onnx.helper, saved."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *in_dims])
    out_dims = [f"d{i}" for i in range(out_rank or len(in_dims))]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *out_dims])
    graph = helper.make_graph(list(nodes), "g", [x], [y], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def _weight(name, *shape):
    return onnx.numpy_helper.from_array(np.ones(shape, np.float32), name)


def test_matmul_and_add_make_one_dense(tmp_path):
    """MatMul + Add (a bias), Gemm with transB 0, alpha and beta, an n-ary Sum, a dead branch: as onnxruntime."""
    ort = _ort()
    rng = np.random.default_rng(0)

    def array(name, *shape):
        return onnx.numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)

    nodes = [helper.make_node("MatMul", ["input", "w"], ["m"], name="lin/MatMul"),
             helper.make_node("Add", ["m", "b"], ["a"], name="lin/Add"),
             helper.make_node("Relu", ["a"], ["r"], name="Relu_3"),
             helper.make_node("Tanh", ["a"], ["unused"], name="dead"),
             helper.make_node("Sum", ["r", "a", "r"], ["s"], name="sum"),
             helper.make_node("Gemm", ["s", "w2", "b2"], ["y"], name="head", alpha=0.5, beta=2.0)]
    path = _write(tmp_path, nodes, [array("w", 6, 5), array("b", 5), array("w2", 5, 3), array("b2", 1, 3)],
                  in_dims=(6,))
    graph = from_onnx(path)
    assert [(n.name, n.layer, n.inputs) for n in graph.nodes] == [
        ("lin", nn.Dense(5), ("input",)), ("relu1", nn.ReLU(), ("lin",)), ("sum", nn.Add(), ("relu1", "lin", "relu1")),
        ("head", nn.Dense(3), ("sum",))]
    spec = multidev.ModelSpec("net", (6,), 3, graph=graph)
    x = rng.normal(size=(4, 6))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, {"input": x.astype(np.float32)})[0]
    np.testing.assert_allclose(reference.predict(spec, spec.init(0), x), want, rtol=1e-5, atol=1e-5)


def _refused(tmp_path, case):
    """A file with one node that multidev.nn cannot express (``case``), built with onnx.helper."""
    image, w = (3, 8, 8), [_weight("w", 3, 3, 3, 3)]
    files = {
        "softplus": lambda: _write(tmp_path, [helper.make_node("Softplus", ["input"], ["y"], name="act")]),
        "same-lower": lambda: _write(tmp_path, [
            helper.make_node("Conv", ["input", "w"], ["c"], name="c", strides=[2, 2], auto_pad="SAME_LOWER"),
            helper.make_node("GlobalAveragePool", ["c"], ["p"], name="p"),
            helper.make_node("Flatten", ["p"], ["y"], name="f")], w, in_dims=image, out_rank=1),
        "kernel": lambda: _write(tmp_path, [helper.make_node("Conv", ["input", "w"], ["y"], name="c")],
                                 [_weight("w", 3, 3, 3, 1)], in_dims=image),
        "storage-order": lambda: _write(tmp_path, [helper.make_node("MaxPool", ["input"], ["y"], name="p",
                                                                    kernel_shape=[2, 2], storage_order=1)],
                                        in_dims=image),
        "pool-dilations": lambda: _write(tmp_path, [helper.make_node("MaxPool", ["input"], ["y"], name="p",
                                                                     kernel_shape=[2, 2], dilations=[2, 2])],
                                         in_dims=image),
        "momentum": lambda: _write(tmp_path, [helper.make_node("BatchNormalization", ["input", "s", "b", "m", "v"],
                                                               ["y"], name="bn", momentum=1.0)],
                                   [_weight(n, 4) for n in "sbmv"]),
        "hardsigmoid": lambda: _write(tmp_path, [helper.make_node("HardSigmoid", ["input"], ["y"], name="h")]),
        "clip": lambda: _write(tmp_path, [helper.make_node("Clip", ["input"], ["y"], name="c", min=-1.0, max=1.0)],
                               opset=9),
        "batched-matmul": lambda: _write(tmp_path, [helper.make_node("MatMul", ["input", "input"], ["y"], name="mm")]),
        "matmul-3d-weight": lambda: _write(tmp_path, [helper.make_node("MatMul", ["input", "w"], ["y"], name="mm")],
                                           [_weight("w", 2, 8, 8)], in_dims=image),
        "scale": lambda: _write(tmp_path, [helper.make_node("Mul", ["input", "w"], ["y"], name="scale")],
                                [_weight("w", 4)]),
        "transpose": lambda: _write(tmp_path, [helper.make_node("Transpose", ["input"], ["y"], name="t",
                                                                perm=[1, 0, 2, 3])], in_dims=image),
    }
    return files[case]()


@pytest.mark.parametrize("case, message", [
    ("softplus", "ONNX node 'act' (op Softplus) is not supported by multidev.nn: supported ops are Add ("),
    ("same-lower", "ONNX node 'c' (op Conv) has auto_pad SAME_LOWER, which pads 8x8 inputs by (top 1, bottom 0, "
                   "left 1, right 0): multidev.nn's 'same' puts the odd row and column at the bottom and right"),
    ("kernel", "ONNX node 'c' (op Conv) has kernel 3x1: multidev.nn's Conv2d needs a square 2-D window"),
    ("storage-order", "ONNX node 'p' (op MaxPool) has storage_order 1 (column-major indices): multidev.nn's "
                      "MaxPool2d gives no indices"),
    ("pool-dilations", "ONNX node 'p' (op MaxPool) has dilations [2, 2]: multidev.nn's MaxPool2d has no dilation"),
    ("momentum", "ONNX node 'bn' (op BatchNormalization) does not fit multidev.nn's BatchNorm: BatchNorm's momentum "
                 "must be"),
    ("hardsigmoid", "ONNX node 'h' (op HardSigmoid) has alpha 0.2 and beta 0.5: multidev.nn's HardSigmoid is "
                    "torch's"),
    ("clip", "ONNX node 'c' (op Clip) clips to [-1, 1]: multidev.nn clips only to [0, 6] (ReLU6) or [0, inf)"),
    ("batched-matmul", "ONNX node 'mm' (op MatMul) multiplies two computed values of rank 2 and 2: multidev.nn's "
                       "MatMul multiplies each sample's matrices, (N, ..., M, K) by (N, ..., K, P)"),
    ("matmul-3d-weight", "ONNX node 'mm' (op MatMul) multiplies by a weight of shape (2, 8, 8): multidev.nn's Dense "
                         "multiplies the last axis of features or tokens by a matrix"),
    ("scale", "ONNX node 'scale' (op Mul) multiplies by the constant 'w' of shape (4,): multidev.nn's Mul multiplies "
              "computed values; a constant factor may be a number (Scale) or, for images, one per channel"),
    ("transpose", "ONNX node 't' (op Transpose) transposes a computed value (perm [1, 0, 2, 3]), moving its batch "
                  "axis: multidev.nn keeps the batch axis first"),
])
def test_what_multidev_cannot_express_is_one_line_naming_the_node(tmp_path, case, message):
    path = _refused(tmp_path, case)
    with pytest.raises(MultidevError, match="^" + re.escape(message)) as err:
        from_onnx(path)
    assert "\n" not in str(err.value)


def test_a_file_that_is_not_onnx_is_one_line(tmp_path):
    text, empty = tmp_path / "notes.onnx", tmp_path / "empty.onnx"
    text.write_text("not a model\n")
    empty.write_bytes(b"")
    for path, message in ((text, "is not an ONNX model"), (empty, "is not an ONNX model"),
                          (tmp_path / "missing.onnx", "does not exist")):
        with pytest.raises(MultidevError, match=message) as err:
            from_onnx(path)
        assert "\n" not in str(err.value)


def test_importing_multidev_nn_imports_no_onnx():
    code = "import sys, multidev.nn as nn; assert 'onnx' not in sys.modules; assert callable(nn.from_onnx)"
    subprocess.run([sys.executable, "-c", code], check=True)
