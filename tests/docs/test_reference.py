"""docs/reference/settings.md and cli.md are what ``python -m multidev.settings.reference`` writes now."""

import subprocess
import sys
from pathlib import Path

import pytest

from multidev.cli.parser import parser
from multidev.settings import fields
from multidev.settings import reference
from multidev.settings.run import Settings

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("torch", "jax", "flax", "optax", "mxnet")


@pytest.mark.parametrize("path", sorted(reference.pages()))
def test_committed_page_is_what_the_generator_writes(path):
    committed = (ROOT / path).read_text() if (ROOT / path).exists() else ""
    assert committed == reference.pages()[path], \
        f"{path} differs from the settings and the parser: run `python -m multidev.settings.reference`"


def test_every_setting_and_every_flag_is_on_its_page():
    pages = reference.pages()
    settings, cli = pages[reference.SETTINGS_PAGE], pages[reference.CLI_PAGE]
    missing = [f.name for f, _ in fields.fields(Settings) if f"| `{f.name}` |" not in settings]
    commands = next(a for a in parser()._actions if a.dest == "command").choices
    missing += [f"{name} {o}" for name, command in commands.items() for a in command._actions
                for o in a.option_strings if o not in ("-h", "--help") and f"`{o}`" not in cli]
    missing += [name for name in commands if f"## multidev {name}" not in cli]
    assert not missing, missing


def test_check_finds_a_stale_page_and_writing_mends_it(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    assert reference.main(["--root", str(tmp_path), "--check"]) == 1
    assert "run `python -m multidev.settings.reference`" in capsys.readouterr().err
    assert reference.main(["--root", str(tmp_path)]) == 0
    for path, text in reference.pages().items():
        assert (tmp_path / path).read_text() == text
    (tmp_path / reference.CLI_PAGE).write_text(reference.pages()[reference.CLI_PAGE].replace("--epochs", "--epoch"))
    assert reference.main(["--root", str(tmp_path), "--check"]) == 1
    assert reference.CLI_PAGE in capsys.readouterr().err


def test_the_generator_imports_no_framework():
    code = ("import sys; from multidev.settings import reference; reference.pages(); "
            f"print([m for m in {FRAMEWORKS!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
