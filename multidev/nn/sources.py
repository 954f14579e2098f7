"""Where a run's model comes from: a zoo name, a Python file's function, an ONNX or JSON file, or an object.

``--model`` takes ``resnet18`` (any zoo name), ``path/net.py:build`` (a
function returning a definition: the one form that runs the user's code, as
the user asked), ``net.onnx`` (imported by :func:`multidev.nn.from_onnx`,
weights and all) or ``net.json`` (a definition stored as data, as
checkpoints hold it). In Python the setting also takes a definition object.
:func:`check` runs when the settings are made (so a bad value is one line
before anything starts); :func:`definition` when the run builds its model.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Optional, Union

from multidev.errors import MultidevError
from multidev.nn.graph import Graph
from multidev.nn.zoo import ZOO

Model = Union[str, Graph]

#: the model of a run that names none (and resumes nothing)
DEFAULT = "resnet18"

FORMS = f"{', '.join(ZOO)}, path/net.py:function, net.onnx or net.json"


def _file(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise MultidevError(f"model file {path} does not exist: give {FORMS}")
    return p


def check(value: Any) -> Model:
    """The model setting in canonical form: a name or path as given (checked), a definition as its Graph."""
    if hasattr(value, "graph") and callable(value.graph):
        return value.graph()
    if not isinstance(value, str):
        raise MultidevError(f"model must be {FORMS}, or a multidev.nn definition; got {type(value).__name__}")
    if value.lstrip().startswith("{"):
        return Graph.from_dict(json.loads(value))  # a definition handed to a worker as data
    if value in ZOO:
        return value
    path, sep, function = value.rpartition(":")
    if sep and path.endswith(".py"):
        _file(path)
        if not function.isidentifier():
            raise MultidevError(f"--model {value}: name the function after the colon, e.g. {path}:build")
        return value
    if value.endswith((".onnx", ".json")):
        _file(value)
        return value
    raise MultidevError(f"unknown model {value!r}: give {FORMS}")


def text(value: Model) -> str:
    """The setting as a worker's ``--model`` text: names and paths as they are, a definition as JSON (or its file)."""
    if isinstance(value, Graph):
        return value.source or json.dumps(value.to_dict(), separators=(",", ":"))
    return value


def label(value: Optional[Model]) -> str:
    """A short name for reports: the zoo name (None: the default's), the file's stem, or "model"."""
    value = DEFAULT if value is None else value
    if isinstance(value, Graph):
        return Path(value.source).stem if value.source else "model"
    if value in ZOO:
        return value
    return Path(value.rpartition(":")[0] if ".py:" in value else value).stem


def definition(value: Optional[Model]) -> Graph:
    """The definition itself: from the zoo (None: the default), a Python function, an ONNX file or a JSON file."""
    value = DEFAULT if value is None else value
    if isinstance(value, Graph):
        return value
    if value in ZOO:
        return ZOO[value]().graph()
    if value.endswith(".onnx"):
        from multidev.nn.onnx import from_onnx
        return from_onnx(value)
    if value.endswith(".json"):
        try:
            return Graph.from_dict(json.loads(_file(value).read_text()))
        except (ValueError, KeyError, TypeError) as e:
            raise MultidevError(f"{value} is not a multidev model definition ({e})") from None
    return _call(value)


def _call(value: str) -> Graph:
    path, _, function = value.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"multidev_user_model_{abs(hash(path))}", _file(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    build = getattr(module, function, None)
    if not callable(build):
        raise MultidevError(f"{path} has no function {function}: define {function}() returning a multidev.nn model")
    made = build()
    if not (hasattr(made, "graph") and callable(made.graph)):
        raise MultidevError(f"{value} returned {type(made).__name__}, not a multidev.nn definition "
                            f"(nn.Sequential, nn.Model, ...)")
    return made.graph()
