"""MkDocs hook: every design record under docs/design/ in the nav, without listing each in mkdocs.yml.

The "Design records" section names its first and last pages; the records
between them are the other ``design/*.md`` files, in file-name order, each
titled by its first heading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SECTION = "Design records"


def on_config(config: Any) -> Any:
    docs = Path(config["docs_dir"])
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and SECTION in entry:
            pages = entry[SECTION]
            listed = {p if isinstance(p, str) else next(iter(p.values())) for p in pages}
            others = [f"design/{p.name}" for p in sorted((docs / "design").glob("*.md"))
                      if f"design/{p.name}" not in listed]
            entry[SECTION] = pages[:1] + others + pages[1:]
    return config
