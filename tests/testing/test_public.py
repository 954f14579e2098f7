"""multidev.testing offers all of the kit from one place: every check class, and every helper engines' tests use."""

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import multidev.testing as kit

ROOT = Path(__file__).resolve().parents[2]


def kit_modules():
    for info in pkgutil.iter_modules(kit.__path__, prefix="multidev.testing."):
        if not info.name.rsplit(".", 1)[1].startswith("_"):
            yield importlib.import_module(info.name)


def test_every_check_class_is_in_all():
    checks = {name for module in kit_modules() for name, cls in inspect.getmembers(module, inspect.isclass)
              if cls.__module__ == module.__name__ and name.endswith("Checks") and not name.startswith("_")}
    assert {"DataChecks", "LayerChecks", "PendingChecks", "MultiProcessChecks", "RecipeChecks"} <= checks
    assert sorted(checks - set(kit.__all__)) == []


def test_all_names_what_the_package_holds():
    assert len(kit.__all__) == len(set(kit.__all__))
    assert [name for name in kit.__all__ if not hasattr(kit, name)] == []


def test_no_test_imports_the_kits_private_modules():
    """Engines' tests and examples import what multidev.testing offers, not its underscored modules."""
    private = re.compile(r"^\s*(from|import)\s+multidev\.testing\._", re.MULTILINE)
    files = [path for folder in ("backends", "examples", "tests", "bench") for path in (ROOT / folder).rglob("*.py")]
    assert files
    assert [str(p.relative_to(ROOT)) for p in files if private.search(p.read_text(encoding="utf-8"))] == []
