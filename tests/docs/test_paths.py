"""Every repository path README.md and docs/ quote (in backticks or as a link) exists.

A token counts as a repository path when its first folder is one of the
repository's top-level folders (``multidev/settings/run.py``,
``backends/jax/``, ``.ci/run``); a relative link must resolve from its page.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", re.M | re.S)
CODE = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)  # within a paragraph
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*)?\)|^[ \t]*\[[^\]]+\]:\s*<?(\S+?)>?\s*$", re.M)
PLACEHOLDER = re.compile(r"[<>{}*$?\[\]|]")


def top_folders(root: Path = ROOT) -> set[str]:
    """The repository's tracked top-level folders (a local .venv or out/ is none of them)."""
    try:
        files = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: its folders as they are
        return {p.name for p in root.iterdir() if p.is_dir()}
    return {f.split("/")[0] for f in files if "/" in f}


def quoted_paths(text: str, folders: set[str]) -> list[str]:
    """The repository paths quoted in ``text``'s inline code, as written (line numbers and test ids cut off)."""
    found = []
    for span in CODE.finditer(FENCE.sub("", text)):
        for word in span.group(2).split():
            word = word.strip("\"'.,;()").removeprefix("./").split(":")[0]
            if "/" in word and word.split("/")[0] in folders and not PLACEHOLDER.search(word):
                found.append(word)
    return found


def links(text: str) -> list[str]:
    """The relative link targets of ``text`` (no web address, no anchor of the page itself), anchors cut off."""
    out = []
    for m in LINK.finditer(FENCE.sub("", text)):
        target = (m.group(1) or m.group(2)).split("#")[0].split("?")[0]
        if target and not re.match(r"[a-zA-Z][\w+.-]*:", target) and not target.startswith("/"):
            out.append(target)
    return out


def dead_paths(page: Path, text: str, root: Path = ROOT, folders: set[str] | None = None) -> list[str]:
    """What ``text`` (the text of ``page``) quotes or links to that does not exist."""
    folders = top_folders(root) if folders is None else folders
    dead = [f"`{p}`" for p in quoted_paths(text, folders) if not (root / p).exists()]
    dead += [f"({t})" for t in links(text) if not (page.parent / t).exists()]
    return dead


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_quoted_paths_and_links_exist(page):
    dead = dead_paths(page, page.read_text())
    assert not dead, f"{page.relative_to(ROOT)} names paths that do not exist: {', '.join(dead)}"


def test_a_planted_dead_path_is_caught(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (tmp_path / "multidev").mkdir()
    (tmp_path / "multidev" / "real.py").write_text("")
    (tmp_path / "docs" / "other.md").write_text("")
    text = ("A stray ` ends no span past its paragraph.\n\n"
            "Read `multidev/real.py:12`, `multidev/gone.py` and `python -m pytest multidev/missing/`;\n"
            "`path/net.py:function` and `multidev/<name>.py` are no repository paths.\n"
            "```\nmultidev/in_a_fence.py\n```\n"
            "[other](other.md#a-heading), [gone](gone.md), [web](https://example.org/x.md), [here](#top)\n"
            "[ref]: ../multidev/lost.py\n")
    dead = dead_paths(page, text, tmp_path, folders={"multidev", "docs"})
    assert dead == ["`multidev/gone.py`", "`multidev/missing/`", "(gone.md)", "(../multidev/lost.py)"]
