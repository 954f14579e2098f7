"""Engines found through the entry point, by name; a missing or broken one is one line, not fatal."""

import subprocess
import sys

import pytest

from multidev import BackendNotInstalled, MultidevError, installed_backends, load_backend
from multidev.engines import registry
from multidev.testing.fake import registered


def test_import_multidev_imports_no_framework():
    code = ("import sys, multidev; bad = [m for m in ('torch', 'jax', 'flax', 'optax', 'mxnet') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_first_party_engines_register_through_the_entry_point():
    assert "torch" in installed_backends()
    eps = registry._entry_points()
    assert eps["torch"].value == "multidev_torch:TorchBackend"


def test_unknown_backend():
    with pytest.raises(MultidevError, match="unknown backend 'tensorflow'"):
        load_backend("tensorflow")


def test_known_engine_not_installed_says_what_to_install(monkeypatch):
    monkeypatch.setattr(registry, "_entry_points", lambda: {})
    with pytest.raises(BackendNotInstalled, match=r"pip install -c constraints.txt ./backends/jax"):
        load_backend("jax")


@pytest.mark.slow  # a fresh interpreter loading every engine: 6 s of the quick suite on a Zen 3 EPYC
def test_broken_third_party_engine_does_not_break_the_others(tmp_path):
    """An engine whose framework is missing is reported, not fatal, and found by entry point alone."""
    (tmp_path / "brokenengine.py").write_text("import no_such_framework_here\n")
    env = registered(tmp_path, {"broken": "brokenengine:Engine"})
    line = "the broken engine cannot import no_such_framework_here: run `reinstall the package that provides 'broken'`"
    listing = subprocess.run([sys.executable, "-m", "multidev", "backends"], capture_output=True, text=True, env=env)
    assert f"broken: unusable: {line}" in listing.stdout.splitlines()
    assert "torch: multidev-torch" in listing.stdout
    train = subprocess.run([sys.executable, "-m", "multidev", "train", "--backend", "broken"],
                           capture_output=True, text=True, env=env)
    assert train.returncode == 2 and train.stderr.splitlines() == [f"multidev: error: {line}"], train.stderr
