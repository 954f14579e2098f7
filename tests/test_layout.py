"""The packages' layout: no import cycle, no function over 60 lines (issue 21), in the core (multidev/) and in
every engine package (backends/*/multidev_*, examples/numpy_engine/multidev_numpy)."""

import ast
import graphlib
from pathlib import Path

import pytest

import multidev

ROOT = Path(multidev.__file__).parent
REPO = ROOT.parent
ENGINES = sorted([*REPO.glob("backends/*/multidev_*"), REPO / "examples" / "numpy_engine" / "multidev_numpy"])
PACKAGES = [ROOT, *(p for p in ENGINES if (p / "__init__.py").is_file())]  # not the .egg-info folders
LONGEST = 60


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The core modules ``name`` imports (a package importing its own parts is no cycle)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            module = ".".join(base[:len(base) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                else node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name and not t.startswith(name + ".")}
    return out


def test_the_engine_packages_are_found():
    assert {p.name for p in PACKAGES} >= {"multidev", "multidev_torch", "multidev_jax", "multidev_mxnet",
                                          "multidev_numpy"}


def test_the_core_graph_is_read():
    graph = {name: imports(name, path, modules()) for name, path in modules().items()}
    assert "multidev.training.api" in graph and "multidev.settings.run" in graph["multidev.training.api"]


@pytest.mark.parametrize("root", PACKAGES, ids=lambda p: p.name)
def test_no_import_cycle(root):
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the modules of a cycle


def test_a_planted_cycle_in_a_package_is_found(tmp_path):
    """Relative imports resolved as the engines write them: a module's import of a sibling, a package's of its part
    (no cycle), and a sub-package's module importing back up."""
    package = tmp_path / "multidev_x"
    (package / "forms").mkdir(parents=True)
    files = {"__init__.py": "from .backend import X\n", "backend.py": "from .forms import one\n",
             "forms/__init__.py": "from .one import Y\n", "forms/one.py": "from ..model import Z\n",
             "model.py": "from .forms.one import Y\n"}
    for name, text in files.items():
        (package / name).write_text(text)
    known = modules(package)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert graph["multidev_x.forms.one"] == {"multidev_x.model"}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        assert set(exc.args[1]) >= {"multidev_x.model", "multidev_x.forms.one"}
    else:
        raise AssertionError("a cycle went unseen")


def test_a_planted_cycle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        assert set(exc.args[1]) == {"a", "b", "c"}
    else:
        raise AssertionError("a cycle went unseen")


@pytest.mark.parametrize("root", PACKAGES, ids=lambda p: p.name)
def test_no_function_over_60_lines(root):
    long = [f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})"
            for path in root.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > LONGEST]
    assert not long, long


def test_every_sub_package_opens_with_its_concept():
    for init in ROOT.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 60, f"{init.parent.name}/ has no concept docstring"
