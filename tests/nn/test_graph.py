"""The model language: definitions written three ways flatten to one graph of canonically named layers."""

import json

import pytest

from multidev import MultidevError, nn
from multidev.rules.models import ModelSpec


@pytest.mark.parametrize("name", ["resnet18", "lenet"])
def test_the_zoo_keeps_the_canonical_names_and_order(name):
    """Every checkpoint ever written loads: the definitions give ModelSpec's parameters exactly, in order."""
    for shape, classes in (((1, 28, 28), 10), ((3, 32, 32), 7)):
        assert nn.ZOO[name]().graph().params(shape, classes) == ModelSpec(name, shape, classes).params()


def test_the_issues_example_builds_with_readable_names():
    net = nn.Sequential(
        nn.Conv2d(32, 3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(),
        nn.Residual(nn.Conv2d(32, 3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(),
                    nn.Conv2d(32, 3, padding=1, bias=False), nn.BatchNorm()),
        nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25), nn.GlobalAvgPool(), nn.Dense(10))
    graph = net.graph()
    assert [n.name for n in graph.nodes] == [
        "conv1", "bn1", "relu1", "res1.conv1", "res1.bn1", "res1.relu1", "res1.conv2", "res1.bn2", "res1.add",
        "relu2", "maxpool1", "dropout1", "gap1", "fc1"]
    assert graph.nodes[8].inputs == ("res1.bn2", "relu1")  # the identity shortcut
    shapes = graph.shapes((1, 8, 8))
    assert shapes["maxpool1"] == (32, 4, 4) and shapes["fc1"] == (10,)
    params = {p.name: p.shape for p in graph.params((1, 8, 8), 10)}
    assert params["res1.conv2.weight"] == (32, 32, 3, 3) and params["fc1.weight"] == (10, 32)


def test_a_name_given_to_one_layer_is_not_given_to_another():
    """An unnamed Dense is numbered past the one the user named fc1, before or after it; the zoo's names are as
    they were (the test above)."""
    before = nn.Sequential(nn.Flatten(), nn.Dense(32, name="fc1"), nn.ReLU(), nn.Dense()).graph()
    after = nn.Sequential(nn.Flatten(), nn.Dense(32), nn.ReLU(), nn.Dense(name="fc1")).graph()
    assert [n.name for n in before.nodes] == ["flatten1", "fc1", "relu1", "fc2"]
    assert [n.name for n in after.nodes] == ["flatten1", "fc2", "relu1", "fc1"]
    inner = nn.Sequential(nn.Sequential(nn.Dense(4), nn.Dense(4, name="fc1"), name="head"), nn.Dense()).graph()
    assert [n.name for n in inner.nodes] == ["head.fc2", "head.fc1", "fc1"]


def test_functional_form_with_add_and_concat():
    x = nn.Input()
    a = nn.Conv2d(4, 3, padding=1)(x)
    b = nn.Conv2d(2, 1, name="side")(x)
    joined = nn.Concat()(a, b)
    y = nn.Add()(joined, nn.Conv2d(6, 1)(x))
    out = nn.Dense(3)(nn.Flatten()(y))
    graph = nn.Model(x, out).graph()
    assert [(n.name, n.inputs) for n in graph.nodes] == [
        ("conv1", ("input",)), ("side", ("input",)), ("concat1", ("conv1", "side")), ("conv2", ("input",)),
        ("add1", ("concat1", "conv2")), ("flatten1", ("add1",)), ("fc1", ("flatten1",))]
    assert graph.shapes((1, 5, 5))["concat1"] == (6, 5, 5)
    assert graph.params((1, 5, 5), 3)[-2].shape == (3, 150)


def test_a_definition_is_data_and_reads_back_without_code():
    graph = nn.resnet18().graph()
    text = json.dumps(graph.to_dict())
    again = nn.Graph.from_dict(json.loads(text))
    assert again == graph and again.params((1, 8, 8), 10) == graph.params((1, 8, 8), 10)
    data = graph.to_dict()
    data["nodes"][0]["layer"] = "Attention"
    with pytest.raises(MultidevError, match="layer 'Attention' of node 'stem.conv' is unknown to this multidev"):
        nn.Graph.from_dict(data)
    with pytest.raises(MultidevError, match="the model definition is multidev-model/2, from a newer multidev"):
        nn.Graph.from_dict(dict(graph.to_dict(), format="multidev-model/2"))


@pytest.mark.parametrize("net, shape, line", [
    (nn.Sequential(nn.Conv2d(8, 9)), (1, 8, 8), r"Conv2d 'conv1': its 9x9 window is larger than its 8x8 input"),
    (nn.Sequential(nn.Conv2d(8, 3), nn.Dense(10)), (1, 8, 8),
     r"the model ends in \(8, 6, 10\) values per sample, the data has 10 classes: put Flatten or GlobalAvgPool "
     r"before its last Dense, which works on the last axis alone"),
    (nn.Sequential(nn.Residual(nn.Conv2d(8, 3, padding=1), name="block")), (1, 8, 8),
     r"Add 'block.add' adds inputs of other shapes: \(8, 8, 8\) and \(1, 8, 8\)"),
    (nn.Sequential(nn.Flatten(), nn.MaxPool2d(2)), (1, 8, 8),
     r"MaxPool2d 'maxpool1' needs images \(C, H, W\) but gets features \(64,\)"),
    (nn.Sequential(nn.MaxPool2d(2), nn.MaxPool2d(2), nn.MaxPool2d(4)), (1, 8, 8),
     r"MaxPool2d 'maxpool3': its 4x4 window is larger than its 2x2 input"),
    (nn.Sequential(nn.Flatten(), nn.Dense(5)), (1, 8, 8),
     r"the model ends in \(5,\) values per sample, the data has 10 classes: end it with Dense\(10\)"),
])
def test_a_bad_definition_is_one_line_naming_the_layer(net, shape, line):
    with pytest.raises(MultidevError, match=line):
        net.graph().params(shape, 10)


@pytest.mark.parametrize("make, line", [
    (lambda: nn.Dropout(1.0), r"Dropout's rate must be in \[0, 1\), got 1.0"),
    (lambda: nn.Dropout(-0.1), r"Dropout's rate must be in \[0, 1\), got -0.1"),
    (lambda: nn.Conv2d(0, 3), "Conv2d's out_channels must be a whole number of at least 1, got 0"),
    (lambda: nn.Sequential(nn.ReLU(), "relu").graph(), "'relu' is not a layer"),
    (lambda: nn.Add()(nn.Input()), "Add takes two inputs or more, got 1"),
    (lambda: nn.Sequential(nn.ReLU(name="a"), nn.Tanh(name="a")).graph(), "two layers are named 'a'"),
])
def test_bad_layers_are_refused_when_written(make, line):
    with pytest.raises(MultidevError, match=line):
        make()


def test_every_zoo_model_fits_images_and_mlp_fits_features():
    for name, make in nn.ZOO.items():
        assert make().graph().params((1, 28, 28), 10)[-1].shape == (10,), name
    assert nn.mlp().graph().params((20,), 3)[0].shape == (256, 20)


@pytest.mark.parametrize("damage, line", [
    (lambda d: d["nodes"][1].update(inputs=["nope"]), "node 'fc1' takes 'nope', not a node before it"),
    (lambda d: d["nodes"][0].pop("args"), "node 0 of the model definition is not a layer's name, layer, args"),
    (lambda d: d.update(format="x"), "not a multidev model definition (format 'x')"),
])
def test_a_damaged_definition_file_is_one_line(tmp_path, damage, line):
    from multidev.nn import sources

    data = nn.Sequential(nn.Flatten(), nn.Dense(8), nn.Dense()).graph().to_dict()
    damage(data)
    (tmp_path / "net.json").write_text(json.dumps(data))
    with pytest.raises(MultidevError) as caught:
        sources.definition(str(tmp_path / "net.json"))
    assert str(caught.value).startswith(f"{tmp_path / 'net.json'}: {line}"), caught.value


def test_a_kind_of_layer_for_a_layer_is_one_line():
    with pytest.raises(MultidevError, match=r"nn\.Flatten is a kind of layer, not a layer: write "
                                            r"nn\.Flatten\(\.\.\.\)"):
        nn.Sequential(nn.Flatten, nn.Dense()).graph()
