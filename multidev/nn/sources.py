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
import traceback
from pathlib import Path
from typing import Any, Optional, Union

from multidev.errors import MultidevError, UserCodeError
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
    if value.lstrip().startswith("{"):  # a definition handed to a worker as data
        try:
            return Graph.from_dict(json.loads(value))
        except ValueError as e:
            raise MultidevError(f"--model's definition is not JSON ({e}): give {FORMS}") from None
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
    if value.endswith(".py"):
        raise MultidevError(f"--model {value}: name the function that returns the model after a colon, e.g. "
                            f"{value}:build")
    if value.endswith(".npz"):
        raise MultidevError(f"--model {value}: a .npz is a checkpoint or data, not a model: continue a checkpoint "
                            f"with --resume {value} (its model comes with it), or give data with --dataset {value}")
    raise MultidevError(f"unknown model {value!r}: give {FORMS}")


def text(value: Model) -> str:
    """The setting as a worker's ``--model`` text: names and paths as they are, a definition as JSON (or its file)."""
    if isinstance(value, Graph):
        return value.source or json.dumps(value.to_dict(), separators=(",", ":"))
    return value


def file_of(value: str) -> str:
    """The file a model setting names: ``net.py`` of ``net.py:build``, else the setting itself."""
    return value.rpartition(":")[0] if ".py:" in value else value


def label(value: Optional[Model]) -> str:
    """A short name for reports: the zoo name (None: the default's), ``net:build`` for a file's function (two
    functions of one file stay apart in a comparison's legend), a file's stem, or "model"."""
    value = DEFAULT if value is None else value
    source = value.source if isinstance(value, Graph) else value
    if not source:
        return "model"
    if source in ZOO:
        return source
    path, sep, function = source.rpartition(":")
    if sep and path.endswith(".py"):
        return f"{Path(path).stem}:{function}"
    return Path(source).stem


def definition(value: Optional[Model]) -> Graph:
    """The definition itself: from the zoo (None: the default), a Python function, an ONNX file or a JSON file."""
    value = DEFAULT if value is None else value
    if isinstance(value, Graph):
        return value
    if value in ZOO:
        return ZOO[value]().graph()
    if value.endswith(".onnx"):
        from multidev.nn.onnx import from_onnx
        return from_onnx(value, warn=False)  # the run says it, where its --normalize is not the file's
    if value.endswith(".json"):
        try:
            return Graph.from_dict(json.loads(_file(value).read_text()))
        except MultidevError as e:
            raise MultidevError(f"{value}: {e}") from None
        except (ValueError, KeyError, TypeError) as e:
            raise MultidevError(f"{value} is not a multidev model definition ({e})") from None
    return _call(value)


def _where(error: BaseException, path: str) -> str:
    """``net.py line 3`` for the deepest line of the user's file in ``error``'s traceback (or its syntax error)."""
    file = Path(path).expanduser().resolve()
    if isinstance(error, SyntaxError) and error.lineno and Path(error.filename or "") == file:
        return f"{path} line {error.lineno}"
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == file]
    return f"{path} line {lines[-1]}" if lines else path


def _user_code(path: str, run: Any) -> Any:
    """``run()``, which runs the user's file: an error there becomes one line naming the file and line."""
    try:
        return run()
    except MultidevError as e:  # multidev's own check of what the code asked for: its words, and where
        raise MultidevError(f"{_where(e, path)}: {e}") from None
    except Exception as e:  # the user's code: a bug of theirs, said where it is
        reason = e.msg if isinstance(e, SyntaxError) else str(e)
        raise UserCodeError(f"{_where(e, path)}: {type(e).__name__}: {reason}") from None


def _call(value: str) -> Graph:
    path, _, function = value.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"multidev_user_model_{abs(hash(path))}", _file(path).resolve())
    module = importlib.util.module_from_spec(spec)
    _user_code(path, lambda: spec.loader.exec_module(module))  # type: ignore[union-attr]
    build = getattr(module, function, None)
    if not callable(build):
        raise MultidevError(f"{path} has no function {function}: define {function}() returning a multidev.nn model")
    made = _user_code(path, build)
    if not (hasattr(made, "graph") and callable(made.graph)):
        raise MultidevError(f"{value} returned {type(made).__name__}, not a multidev.nn definition "
                            f"(nn.Sequential, nn.Model, ...)")
    return _user_code(path, made.graph)
