"""Every module of an engine package is named in its package's ``__init__`` docstring.

A reader (or a porter) starts from the package's docstring; a module it does
not name is one nobody is told about. A subpackage's modules are named in
the subpackage's docstring, and the subpackage in its parent's.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted([*ROOT.glob("backends/*/multidev_*"), ROOT / "examples" / "numpy_engine" / "multidev_numpy"])
CODE = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)  # within a paragraph


def named(docstring: str) -> set[str]:
    """The names a docstring quotes as code: ``batchnorm``, :mod:`.runtime`, ``python -m multidev_mxnet.serve``."""
    return {word.strip(".,;:()").split(".")[-1] for span in CODE.finditer(docstring) for word in span.group(2).split()}


def unnamed_modules(package: Path) -> list[str]:
    """The modules and subpackages under ``package`` that their own package's docstring does not name."""
    missing = []
    for init in sorted(package.rglob("__init__.py")):
        if "tests" in init.relative_to(package).parts:
            continue
        names = named(ast.get_docstring(ast.parse(init.read_text())) or "")
        parts = [p for p in init.parent.iterdir() if (p.suffix == ".py" and p.name != "__init__.py")
                 or (p / "__init__.py").is_file() and p.name != "tests"]
        missing += [str(p.relative_to(package.parent)) for p in sorted(parts) if p.stem not in names]
    return missing


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_module_is_named_in_its_package_docstring(package):
    missing = unnamed_modules(package)
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py's docstring does not name: {', '.join(missing)}"


def test_the_engine_packages_are_found():
    assert {p.name for p in PACKAGES} >= {"multidev_torch", "multidev_jax", "multidev_mxnet", "multidev_numpy"}


def test_a_planted_unnamed_module_is_caught(tmp_path):
    package = tmp_path / "multidev_x"
    (package / "forms").mkdir(parents=True)
    (package / "__init__.py").write_text('"""Engine x: ``backend`` and :mod:`.forms` (``parallel`` is in prose)."""\n')
    (package / "forms" / "__init__.py").write_text('"""Forms: ``one``."""\n')
    for name in ("backend.py", "parallel.py", "model.py", "forms/one.py", "forms/two.py"):
        (package / name).write_text("")
    assert unnamed_modules(package) == ["multidev_x/model.py", "multidev_x/forms/two.py"]
