"""The documentation site builds with ``mkdocs build --strict``: no dead link, anchor or nav entry, no warning."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")


def _missing() -> list[str]:
    out = []
    for name in NEEDS:
        try:
            if importlib.util.find_spec(name) is None:
                out.append(name)
        except ModuleNotFoundError:  # a parent package is absent
            out.append(name)
    return out


@pytest.mark.skipif(bool(_missing()), reason=f"the docs' tools are not installed ({', '.join(_missing())}): "
                                             f"pip install mkdocs-material 'mkdocstrings[python]'")
@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "\n".join(warnings) or done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").is_file()


@pytest.mark.skipif(importlib.util.find_spec("griffe") is None,
                    reason="griffe (from mkdocstrings[python]) is not installed")
def test_docstring_roles_become_code():
    import griffe

    extensions = griffe.load_extensions(str(ROOT / "docs" / "hooks" / "griffe_roles.py"))
    module = griffe.load("multidev.settings.fields", search_paths=[str(ROOT)], extensions=extensions)
    assert ":class:`Flag`" in (ROOT / "multidev" / "settings" / "fields.py").read_text()
    text = module["setting"].docstring.value
    assert "`Flag`" in text and ":class:" not in text, text
