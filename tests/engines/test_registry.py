"""Engines found through the entry point, by name; a missing or broken one is one line, not fatal."""

import subprocess
import sys
import textwrap

import pytest

from multidev import (
    BackendNotInstalled,
    MultidevError,
    installed_backends,
    load_backend,
)
from multidev.engines import registry


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


def test_broken_third_party_engine_does_not_break_the_others(tmp_path):
    """An engine whose framework is missing is reported, not fatal, and found by entry point alone."""
    dist = tmp_path / "brokenengine-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenengine\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[multidev.backends]\nbroken = brokenengine:Engine\n")
    (tmp_path / "brokenengine.py").write_text("import no_such_framework_here\n")
    env_code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        from multidev.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    listing = subprocess.run([sys.executable, "-c", env_code, "backends"], capture_output=True, text=True)
    assert "broken: unusable: the broken engine cannot import no_such_framework_here" in listing.stdout
    assert "torch: multidev-torch" in listing.stdout
    train = subprocess.run([sys.executable, "-c", env_code, "train", "--backend", "broken"],
                           capture_output=True, text=True)
    assert train.returncode == 2 and train.stderr.count("\n") == 1 and "Traceback" not in train.stderr
