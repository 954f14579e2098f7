"""``python -m bench.harness.child MODULE FUNCTION KWARGS RESULT``: the child side of ``bench.harness.fresh``.

Imports ``MODULE``, calls ``FUNCTION(**KWARGS)`` (KWARGS a JSON object) and
writes what it returned to the file ``RESULT`` as JSON.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    module, name, kwargs, out = argv
    fn = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    value = fn(**json.loads(kwargs))
    Path(out).write_text(json.dumps(value))


if __name__ == "__main__":
    main(sys.argv[1:])
