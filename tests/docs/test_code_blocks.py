"""The ```python blocks of README.md and docs/guides/ run, each alone in a fresh interpreter and folder.

A block that cannot run here (it needs a GPU, Ray, a second machine, the
reader's own arrays) says why on the line before it:
``<!-- not run: <reason> -->``. One that trains for more than a few seconds
is marked ``<!-- slow -->`` there instead and runs with ``-m slow``.
"""

import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs" / "guides").glob("*.md")])
#: seconds a block may take; each should run in a few
TIMEOUT = 120
OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*python\b.*$")
MARKER = re.compile(r"^\s*<!--\s*not run\b:?(.*?)-->\s*$")
SLOW = re.compile(r"^\s*<!--\s*slow\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int                       # the opening fence's, from 1
    code: str
    reason: Optional[str] = None    # why it is not run; None: it runs
    slow: bool = False              # it runs with the slow tests

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(text: str, page: str = "page.md") -> list[Block]:
    """Every ```python block of ``text``, with the reason of a ``not run`` marker on the line before it."""
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        opened = OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence = opened.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)
                    and not lines[j].strip().strip(fence[0])), len(lines))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        code = textwrap.dedent("\n".join(lines[i + 1:end]))
        found.append(Block(page, i + 1, code, marker.group(1).strip() if marker else None, bool(SLOW.match(before))))
        i = end + 1
    return found


def stray_markers(text: str) -> list[int]:
    """Lines of ``not run`` and ``slow`` markers that no ```python block follows (a marker that does nothing)."""
    lines = text.splitlines()
    marked = {b.line for b in blocks(text)}
    out = []
    for i, line in enumerate(lines):
        if MARKER.match(line) or SLOW.match(line):
            after = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
            if after is None or after + 1 not in marked:
                out.append(i + 1)
    return out


def run(block: Block, folder: Path, timeout: float = TIMEOUT) -> Optional[str]:
    """None when the block runs to its end in ``folder``; otherwise what went wrong, with its output's tail."""
    script = folder / "block.py"
    script.write_text(block.code + "\n")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    try:
        done = subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"{block.name} ran past {timeout} s"
    if done.returncode:
        return f"{block.name} exited with {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
    return None


ALL = [b for page in PAGES for b in blocks(page.read_text(), str(page.relative_to(ROOT)))]


@pytest.mark.parametrize("block", [pytest.param(b, marks=[pytest.mark.slow] if b.slow else [], id=b.name)
                                   for b in ALL if b.reason is None])
def test_block_runs(block, tmp_path):
    start = time.perf_counter()
    failure = run(block, tmp_path)
    assert failure is None, failure
    print(f"{block.name}: {time.perf_counter() - start:.1f} s")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_block_not_run_says_why(page):
    text = page.read_text()
    unexplained = [b.name for b in blocks(text, page.name) if b.reason == ""]
    assert not unexplained, f"give a reason: <!-- not run: <reason> --> before {', '.join(unexplained)}"
    assert not stray_markers(text), f"{page.name}: a not-run or slow marker with no python block after it, lines " \
                                    f"{stray_markers(text)}"


PLANTED = """\
Runs:

```python
print("fine")
```

<!-- not run: it needs a GPU -->
```python
raise SystemExit("never run")
```

<!-- not run: -->

```python
import sys
sys.exit("a failing block")
```

1. In a list:

    ```python
    x = 1
    ```

<!-- slow -->
```python
y = 2
```

<!-- not run: nothing follows -->
"""


def test_planted_blocks_are_found_and_a_failing_one_is_caught(tmp_path):
    found = blocks(PLANTED)
    assert [(b.line, b.reason, b.slow) for b in found] == [(3, None, False), (8, "it needs a GPU", False),
                                                           (14, "", False), (21, None, False), (26, None, True)]
    assert found[3].code == "x = 1"
    assert stray_markers(PLANTED) == [30]
    assert run(found[0], tmp_path) is None
    assert "a failing block" in run(found[2], tmp_path)
    assert "ran past" in run(Block("page.md", 1, "import time; time.sleep(5)"), tmp_path, timeout=0.5)


def test_the_guides_vit_is_the_one_the_kit_holds_to_a_band(monkeypatch):
    """The ViT docs/guides/your-model.md writes out is ``multidev.testing.layers.docs_vit``, which the kit trains
    on every engine (``test_the_docs_vit_accuracy_band``), trained as the kit trains it."""
    import multidev
    from multidev.testing.layers import VIT_RUN, docs_vit

    page = ROOT / "docs" / "guides" / "your-model.md"
    (block,) = [b for b in blocks(page.read_text(), page.name) if "vit = nn.Sequential(" in b.code]
    calls: list = []
    monkeypatch.setattr(multidev, "train", lambda **kwargs: calls.append(kwargs))
    scope: dict = {}
    exec(compile(block.code, block.name, "exec"), scope)  # the page's own code, its training recorded
    assert scope["vit"].graph() == docs_vit().graph()
    assert [c["backend"] for c in calls] == ["torch", "jax", "mxnet"]
    assert all(c["devices"] == 2 and {k: c[k] for k in VIT_RUN} == VIT_RUN for c in calls)
