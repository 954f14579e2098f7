"""ONNX in and out for values of any rank: Reshape, Transpose, Slice, Split, Concat along any axis, MatMul,
Softmax, Scale, Dense on tokens, LayerNorm over the last axes, and a ViT's token layers and attention.

Why: ViTs, ShuffleNet's channel shuffle and ConvNeXt's permuted blocks are
written with these ops; a torch export of each must read as the layers that
give torch's values (with the batch fixed, as torch exports by default, or
dynamic), and each such layer written by ``to_onnx`` must give multidev's
values in onnxruntime and read back as itself.
"""

import re
import warnings
from collections import Counter

import numpy as np
import pytest

import multidev
from multidev import MultidevError, nn, reference
from multidev.nn.onnx import from_onnx, to_onnx

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (pip install 'multidev[onnx]')")
helper, TensorProto = onnx.helper, onnx.TensorProto


def _torch():
    return pytest.importorskip("torch", reason="torch is not installed: no network to export")


def _ort():
    return pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: nothing runs the ONNX files")


def _random_state(spec) -> dict:
    """Every parameter away from its initial value: LayerNorm's gamma, beta and the biases are not 1 and 0."""
    rng = np.random.default_rng(7)
    state = spec.init(0)
    for p in spec.params():
        state[p.name] = (state[p.name] + rng.normal(0, 0.3, p.shape)).astype(np.float32)
    return state


def _round_trip(tmp_path, graph, in_shape, classes, *, back=None):
    """Written, run by onnxruntime against the float64 reference, read back as ``back`` (the graph itself)."""
    ort = _ort()
    spec = multidev.ModelSpec("m", in_shape, classes, graph=graph)
    state = _random_state(spec)
    path = to_onnx(spec.graph, state, in_shape, tmp_path / "m.onnx")
    x = np.random.default_rng(2).normal(size=(3, *in_shape))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"input": x.astype(np.float32)})[0]
    want = reference.predict(spec, state, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    read = from_onnx(path)
    assert read == (back.resolved(classes) if back else spec.graph)
    for name, value in read.weights.items():
        np.testing.assert_array_equal(value, state[name])
    return read


def test_a_vit_written_runs_in_onnxruntime_and_reads_back(tmp_path):
    """nn.vit: patches, class token, position embedding, attention, GELU MLP, the class token to the head."""
    graph = nn.vit(patch=4, dim=16, depth=2, heads=4, mlp=32).graph()
    read = _round_trip(tmp_path, graph, (3, 16, 16), 5)
    assert Counter(type(n.layer).__name__ for n in read.nodes)["MultiHeadAttention"] == 2


def _shapes_model() -> nn.Model:
    """Each shape layer once, away from its defaults: tokens (8, 6) from images, split, joined, multiplied."""
    x = nn.Input()
    images = nn.LayerNorm(affine=False)(nn.Conv2d(6, 2, stride=2, name="patch")(x))
    t = nn.Transpose((1, 0))(nn.Reshape((6, -1))(images))
    a, b = nn.Slice(1, 0, 3)(t), nn.Slice(-1, 3, None)(t)
    t = nn.Concat(axis=-1)(nn.Scale(0.25)(b), a)
    scores = nn.Softmax(-1)(nn.MatMul()(t, nn.Transpose((1, 0))(t)))
    t = nn.LayerNorm(last=2, affine=False)(nn.MatMul()(scores, t))
    t = nn.MultiHeadAttention(3, bias=False)(nn.Dense(6, bias=False)(t))
    t = nn.Concat(axis=0)(nn.Slice(0, 0, 8, 2)(t), nn.Slice(0, 1, 8, 2)(t))
    return nn.Model(x, nn.Dense()(nn.Flatten()(nn.LayerNorm(eps=1e-3, last=1)(t))))


def test_every_shape_layer_written_runs_in_onnxruntime_and_reads_back(tmp_path):
    _round_trip(tmp_path, _shapes_model().graph(), (3, 8, 4), 4)


def test_droppath_is_written_as_the_identity_it_is_in_inference(tmp_path):
    """ONNX has no DropPath: it is an Identity, and reads back as nothing."""
    graph = nn.Sequential(nn.Flatten(), nn.Residual(nn.Dense(6, name="fc"), nn.DropPath(0.2)), nn.Dense()).graph()
    without = nn.Sequential(nn.Flatten(), nn.Residual(nn.Dense(6, name="fc")), nn.Dense()).graph()
    read = _round_trip(tmp_path, graph, (2, 3), 3, back=without)
    assert [type(n.layer) for n in read.nodes] == [nn.Flatten, nn.Dense, nn.Add, nn.Dense]


def _torch_net(torch):
    """What torchvision's ShuffleNet, ConvNeXt and ViT write, small: a channel shuffle, x.chunk, a permuted
    LayerNorm and Linear, a layer scale, then tokens with a class token, attention, x[:, 0]."""
    t = torch.nn

    class Net(t.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.norm = t.Conv2d(3, 8, 3, padding=1), t.LayerNorm(8, eps=1e-6)
            self.fc1, self.fc2 = t.Linear(8, 16), t.Linear(16, 8)
            self.layer_scale = t.Parameter(torch.rand(8, 1, 1) + 0.5)
            self.class_token = t.Parameter(torch.randn(1, 1, 8))
            self.pos = t.Parameter(torch.randn(1, 17, 8))
            self.attn = t.MultiheadAttention(8, 2, batch_first=True)
            self.head = t.Linear(8, 5)

        def forward(self, x):
            x = self.stem(x)
            n, c, h, w = x.size()
            x = x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)  # ShuffleNet's shuffle
            a, b = x.chunk(2, dim=1)
            x = torch.cat((b, torch.relu(a)), 1)
            y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x.permute(0, 2, 3, 1)))))  # ConvNeXt's block
            x = x + self.layer_scale * y.permute(0, 3, 1, 2)
            x = x.reshape(n, c, h * w).permute(0, 2, 1)  # tokens (16, 8)
            x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1) + self.pos
            x = x + self.attn(x, x, x, need_weights=False)[0]
            q, k = torch.split(x, [4, 4], dim=-1)
            x = x + (torch.softmax(q @ k.transpose(1, 2) / 2.0, dim=-1) @ x) * 0.5
            return self.head(x[:, 0])

    torch.manual_seed(0)
    return Net().eval()


@pytest.mark.parametrize("batch", ["fixed", "dynamic"])
def test_torchs_shapes_tokens_and_attention_read_as_the_layers(tmp_path, batch):
    """A fixed batch (torch's default export) writes the batch size into every shape; a dynamic one writes Shape,
    Gather, Concat... chains; both read as the same layers, which give torch's logits."""
    torch = _torch()
    net, path = _torch_net(torch), tmp_path / "net.onnx"
    dynamic = {"dynamic_axes": {"input": {0: "N"}}} if batch == "dynamic" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on the TorchScript exporter
        torch.onnx.export(net, torch.zeros(1, 3, 4, 4), str(path), dynamo=False, do_constant_folding=False,
                          opset_version=17, input_names=["input"], **dynamic)
    graph = from_onnx(path)
    layers = {n.name: n.layer for n in graph.nodes}
    assert layers["attn"] == nn.MultiHeadAttention(2) and layers["norm"] == nn.LayerNorm(eps=1e-6, last=1)
    assert layers["layer_scale"] == nn.Conv2d(8, 1, groups=8, bias=False)
    counts = Counter(type(layer).__name__ for layer in layers.values())
    assert counts["ClassToken"] == counts["PositionEmbedding"] == counts["Softmax"] == 1
    assert counts["MatMul"] == 2 and counts["Scale"] == 2 and counts["Slice"] == 5
    spec = multidev.ModelSpec("net", (3, 4, 4), 5, graph=graph)
    x = np.random.default_rng(1).normal(size=(3, 3, 4, 4))
    with torch.no_grad():
        want = net.double()(torch.from_numpy(x)).numpy()
    got = reference.predict(spec, spec.init(0), x)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


@pytest.mark.parametrize("bias", [True, False])
def test_torchs_attention_reads_whole_after_a_transpose_the_exporter_merged(tmp_path, bias):
    """Conv features as tokens, x.flatten(2).transpose(1, 2), then attention: torch's exporter merges that
    transpose with the attention's own into one Transpose [2, 0, 1]; read as a Transpose and the attention."""
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn, self.head = torch.nn.MultiheadAttention(8, 4, bias=bias, batch_first=True), torch.nn.Linear(8, 3)

        def forward(self, x):
            t = x.flatten(2).transpose(1, 2)
            return self.head(self.attn(t, t, t, need_weights=False)[0][:, 0])

    torch.manual_seed(0)
    net, path = Net().eval(), tmp_path / "attn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(2, 8, 3, 3), str(path), dynamo=False, do_constant_folding=False,
                          opset_version=17, input_names=["input"], dynamic_axes={"input": {0: "N"}})
    graph = from_onnx(path)
    assert [type(n.layer) for n in graph.nodes] == [nn.Reshape, nn.Transpose, nn.MultiHeadAttention, nn.Slice,
                                                    nn.Flatten, nn.Dense]
    assert graph.nodes[2].layer == nn.MultiHeadAttention(4, bias=bias)
    spec = multidev.ModelSpec("attn", (8, 3, 3), 3, graph=graph)
    x = np.random.default_rng(1).normal(size=(3, 8, 3, 3))
    with torch.no_grad():
        want = net.double()(torch.from_numpy(x)).numpy()
    assert np.abs(reference.predict(spec, spec.init(0), x) - want).max() <= 1e-6 * np.abs(want).max()


def _write(tmp_path, nodes, inits=(), in_dims=(4,), opset=17, out_rank=1, batch="N"):
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, *in_dims])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, *(f"d{i}" for i in range(out_rank))])
    model = helper.make_model(helper.make_graph(list(nodes), "g", [x], [y], list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    path = tmp_path / f"m{len(list(tmp_path.iterdir()))}.onnx"
    onnx.save(model, str(path))
    return path


def _ints(name, values):
    return onnx.numpy_helper.from_array(np.asarray(values, np.int64), name)


def _refused(tmp_path, case):
    """A file with a node that moves the batch or does what no layer does, built with onnx.helper."""
    node, tokens = helper.make_node, (4, 6)
    files = {
        "transpose": lambda: _write(tmp_path, [node("Transpose", ["input"], ["y"], name="t", perm=[1, 0, 2])],
                                    in_dims=tokens),
        "reshape": lambda: _write(tmp_path, [node("Reshape", ["input", "s"], ["y"], name="r")], [_ints("s", [4, -1])],
                                  in_dims=tokens),
        "slice": lambda: _write(tmp_path, [node("Slice", ["input", "a", "b", "ax"], ["y"], name="s")],
                                [_ints("a", [0]), _ints("b", [1]), _ints("ax", [0])], in_dims=tokens),
        "gather": lambda: _write(tmp_path, [node("Gather", ["input", "i"], ["y"], name="g", axis=1)],
                                 [_ints("i", [0, 2, 1])], in_dims=tokens),
        "softmax": lambda: _write(tmp_path, [node("Softmax", ["input"], ["y"], name="sm", axis=1)], in_dims=tokens,
                                  opset=11),
        "matmul": lambda: _write(tmp_path, [node("MatMul", ["input", "input"], ["y"], name="mm")]),
        "pad": lambda: _write(tmp_path, [node("Pad", ["input", "p"], ["y"], name="pad", mode="reflect")],
                              [_ints("p", [0, 1, 0, 1])]),
        "pad-batch": lambda: _write(tmp_path, [node("Pad", ["input", "p"], ["y"], name="pad")],
                                    [_ints("p", [1, 0, 0, 0])]),
    }
    return files[case]()


@pytest.mark.parametrize("case, message", [
    ("transpose", "ONNX node 't' (op Transpose) transposes a computed value (perm [1, 0, 2]), moving its batch axis: "
                  "multidev.nn keeps the batch axis first"),
    ("reshape", "ONNX node 'r' (op Reshape) reshapes to [4, -1], moving the batch axis: multidev.nn keeps the batch "
                "axis first"),
    ("slice", "ONNX node 's' (op Slice) slices along the batch axis: multidev.nn's layers take each sample alone"),
    ("gather", "ONNX node 'g' (op Gather) gathers indices [0, 2, 1] along a sample's axis: multidev.nn takes one "
               "index or a run of evenly spaced ones (a Slice)"),
    ("softmax", "ONNX node 'sm' (op Softmax) normalises axes 1 to 2 together (Softmax below opset 13)"),
    ("matmul", "ONNX node 'mm' (op MatMul) multiplies two computed values of rank 2 and 2: multidev.nn's MatMul "
               "multiplies each sample's matrices"),
    ("pad", "ONNX node 'pad' (op Pad) pads in mode b'reflect': multidev.nn's Pad adds a constant"),
    ("pad-batch", "ONNX node 'pad' (op Pad) pads along the batch axis: multidev.nn's layers take each sample alone"),
])
def test_what_moves_the_batch_or_no_layer_does_is_one_line(tmp_path, case, message):
    path = _refused(tmp_path, case)
    with pytest.raises(MultidevError, match="^" + re.escape(message)) as err:
        from_onnx(path)
    assert "\n" not in str(err.value)


def test_a_pad_that_adds_nothing_reads_as_nothing(tmp_path):
    """torch's Swin pads its patch merging to even sizes: by 0 where they are."""
    nodes = [helper.make_node("Pad", ["input", "p"], ["padded"], name="pad"),
             helper.make_node("Flatten", ["padded"], ["y"], name="f")]
    graph = from_onnx(_write(tmp_path, nodes, [_ints("p", [0, 0, 0, 0])], in_dims=(4, 6)))
    assert [n.layer for n in graph.nodes] == [nn.Flatten()]


def test_a_pad_reads_as_one_pad_per_axis(tmp_path):
    nodes = [helper.make_node("Pad", ["input", "p", "v"], ["padded"], name="pad"),
             helper.make_node("Flatten", ["padded"], ["y"], name="f")]
    value = helper.make_tensor("v", TensorProto.FLOAT, [], [0.5])
    graph = from_onnx(_write(tmp_path, nodes, [_ints("p", [0, 1, 0, 0, 2, 3]), value], in_dims=(4, 6)))
    assert [n.layer for n in graph.nodes] == [nn.Pad(0, 1, 2, 0.5), nn.Pad(1, 0, 3, 0.5), nn.Flatten()]


def test_a_fixed_batch_size_in_a_shape_is_the_batch(tmp_path):
    """torch's default export fixes the batch (1 here): a Reshape to [1, 3, 8] keeps it first, and x[:, 1:3]'s
    Slice of the batch axis from 0 to 1 takes all of it."""
    nodes = [helper.make_node("Reshape", ["input", "s"], ["r"], name="r"),
             helper.make_node("Slice", ["r", "a", "b", "ax"], ["c"], name="c"),
             helper.make_node("Flatten", ["c"], ["y"], name="f")]
    inits = [_ints("s", [1, 3, 8]), _ints("a", [0, 1]), _ints("b", [1, 3]), _ints("ax", [0, 1])]
    graph = from_onnx(_write(tmp_path, nodes, inits, in_dims=(4, 6), batch=1))
    assert [n.layer for n in graph.nodes] == [nn.Reshape((3, 8)), nn.Slice(0, 1, 3), nn.Flatten()]
