"""--model's forms: a zoo name, a Python file's function, a JSON definition; bad ones are one line."""

import json

import pytest

from multidev import nn
from multidev.errors import MultidevError
from multidev.nn import sources
from multidev.rules.models import ModelSpec

NET = '''from multidev import nn


def build():
    return nn.Sequential(nn.Conv2d(4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.2), nn.Flatten(),
                         nn.Dense())


def not_a_model():
    return 42
'''


def test_a_python_files_function(tmp_path):
    (tmp_path / "net.py").write_text(NET)
    value = sources.check(f"{tmp_path}/net.py:build")
    graph = sources.definition(value)
    assert [n.name for n in graph.nodes] == ["conv1", "relu1", "maxpool1", "dropout1", "flatten1", "fc1"]
    assert sources.label(value) == "net:build"
    assert ModelSpec("net", (1, 8, 8), 10, graph).dropouts() == [("dropout1", 0.2, (4, 4, 4))]


def test_a_json_definition_is_data(tmp_path):
    path = tmp_path / "net.json"
    path.write_text(json.dumps(nn.convnet().graph().to_dict()))
    assert sources.definition(sources.check(str(path))) == nn.convnet().graph()


@pytest.mark.parametrize("tail, says", [
    (":missing", "has no function missing"),
    (":not_a_model", "returned int, not a multidev.nn definition"),
])
def test_a_bad_function_is_one_line(tmp_path, tail, says):
    (tmp_path / "net.py").write_text(NET)
    with pytest.raises(MultidevError, match=says):
        sources.definition(sources.check(f"{tmp_path}/net.py{tail}"))


def test_a_definition_from_a_newer_multidev_or_with_an_unknown_layer_is_one_line(tmp_path):
    data = nn.mlp().graph().to_dict()
    (tmp_path / "new.json").write_text(json.dumps({**data, "format": "multidev-model/9"}))
    with pytest.raises(MultidevError, match="from a newer multidev"):
        sources.definition(str(tmp_path / "new.json"))
    data["nodes"][1]["layer"] = "Mish"
    (tmp_path / "mish.json").write_text(json.dumps(data))
    with pytest.raises(MultidevError, match="layer 'Mish' of node 'fc1' is unknown to this multidev"):
        sources.definition(str(tmp_path / "mish.json"))
