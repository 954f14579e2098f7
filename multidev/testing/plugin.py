"""The kit's pytest plugin, installed with multidev (entry point ``pytest11``): the quick suite by default.

The kit marks its training runs ``slow``. An engine's repository (one made
from examples/numpy_engine, say) gets, with no configuration of its own, the
``slow`` marker registered and, in a session that collects the kit's checks,
the slow ones deselected unless a marker expression was given: ``-m slow``
runs them alone, ``-m "slow or not slow"`` runs everything. A session
without the kit is left as it is, and a repository that registers ``slow``
itself (multidev's own, whose addopts say ``-m 'not slow'``) keeps its line.
``-p no:multidev`` turns the plugin off.

pytest loads it in every session of the environment where multidev is
installed, so it imports no framework; as a module of ``multidev.testing`` it
brings the core and the kit (NumPy, no framework: about 0.5 s of CPU here).
"""

from __future__ import annotations

import sys

import pytest

#: the marker's line, as multidev's own pyproject.toml registers it
SLOW = "slow: trains a real model for a minute or more (run with -m slow)"
#: slow variants that repeat a promise another slow test holds (CI runs -m "slow and not full")
FULL = "full: a slow variant beyond CI's time, of a promise another slow test holds (-m slow runs it too)"
#: the module whose classes are the kit's checks: a session that imported it may hold them
KIT = "multidev.testing.kit"


def pytest_configure(config: pytest.Config) -> None:
    known = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, line in (("slow", SLOW), ("full", FULL)):
        if name not in known:
            config.addinivalue_line("markers", line)


def _marker_expression_given(config: pytest.Config) -> bool:
    """``-m`` with any expression, ``-m ""`` included (which asks for every test)."""
    return bool(config.option.markexpr) or "-m" in config.invocation_params.args


def _is_kit_check(item: pytest.Item) -> bool:
    kit = sys.modules.get(KIT)
    cls = getattr(item, "cls", None)
    return kit is not None and cls is not None and issubclass(cls, kit.EngineFixtures)


#: how many slow tests this session deselected
DESELECTED = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the slow tests of a session that runs the kit and was given no marker expression."""
    if _marker_expression_given(config) or not any(_is_kit_check(item) for item in items):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
        config.hook.pytest_deselected(items=slow)
    config.stash[DESELECTED] = len(slow)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if DESELECTED not in config.stash:
        return None
    return f"multidev: the kit's quick suite; {config.stash[DESELECTED]} slow tests deselected (-m slow runs them)"
