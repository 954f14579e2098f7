"""The pytest plugin installed with multidev: an engine made from the NumPy template runs the kit's quick checks.

Each test runs pytest as a user does, in a subprocess, in a folder outside this
repository (no conftest.py or pyproject.toml of ours above it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "examples" / "numpy_engine"
#: a few of the kit's checks, quick and slow, by name
QUICK = ("test_each_device_holds_its_shard", "test_dropout_without_masks_is_refused")
SLOW = ("test_quickstart_accuracy_band", "test_image_folder_trains_as_its_arrays")
#: their cases: the accuracy band's two (the largest device count, and the others)
SLOW_CASES = 3


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def engine_repository(tmp_path_factory) -> Path:
    """The template copied as an engine's author starts: its files, no build outputs."""
    folder = tmp_path_factory.mktemp("engine") / "multidev-myengine"
    assert ROOT not in folder.parents
    shutil.copytree(TEMPLATE, folder, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", ".pytest_cache"))
    return folder


def collected(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_kits_quick_checks_run_and_pass_by_default(engine_repository):
    report = engine_repository / "report.xml"
    proc = pytest_in(engine_repository, "-k", " or ".join(QUICK + SLOW), "--junitxml", str(report))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    ran = {case.get("name"): [child.tag for child in case] for case in ET.parse(report).iter("testcase")}
    assert sorted(ran) == sorted(QUICK) and all(outcome == [] for outcome in ran.values()), ran  # each passed
    assert f"multidev: the kit's quick suite; {SLOW_CASES} slow tests deselected" in out, out[-2000:]
    assert "PytestUnknownMarkWarning" not in out and "Unknown pytest.mark" not in out, out[-3000:]


@pytest.mark.slow
def test_every_slow_test_is_deselected_by_default_and_runs_with_m_slow(engine_repository):
    default = pytest_in(engine_repository, "--collect-only", "-q")
    slow = collected(pytest_in(engine_repository, "--collect-only", "-q", "-m", "slow"))
    quick = collected(default)
    assert any(name in test for name in SLOW for test in slow) and any(QUICK[0] in test for test in quick)
    assert set(quick).isdisjoint(slow)
    assert f"{len(slow)} deselected" in default.stdout and "slow tests deselected (-m slow runs them)" in default.stdout
    everything = collected(pytest_in(engine_repository, "--collect-only", "-q", "-m", ""))
    assert sorted(everything) == sorted(quick + slow)


@pytest.mark.slow
def test_slow_is_registered_once_here_and_in_the_engine(engine_repository):
    for folder in (ROOT, engine_repository):
        proc = pytest_in(folder, "--markers")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert len(re.findall(r"^@pytest\.mark\.slow:", proc.stdout, re.MULTILINE)) == 1, proc.stdout


def test_a_session_without_the_kit_is_left_as_it_is(tmp_path):
    (tmp_path / "test_other.py").write_text("import pytest\n\n\n@pytest.mark.slow\ndef test_long():\n    pass\n\n\n"
                                            "def test_short():\n    pass\n")
    proc = pytest_in(tmp_path, "-W", "error::pytest.PytestUnknownMarkWarning")
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "deselected" not in proc.stdout
