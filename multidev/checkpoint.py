"""One framework-neutral checkpoint format, written atomically (SPEC §7).

A checkpoint is a NumPy ``.npz`` archive: every canonical array under its
canonical name, plus ``__meta__``, a JSON document (model, input shape,
classes, epoch, seed, history). Any engine reads it; a crash mid-write leaves
the previous file intact because the new one is renamed into place.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .errors import MultidevError
from .models import ModelSpec, State

FORMAT = "multidev-checkpoint/1"
META = "__meta__"


def save(path: str | Path, spec: ModelSpec, state: State, **meta: Any) -> Path:
    path = Path(path)
    spec.check(state)
    header = {"format": FORMAT, "model": spec.name, "in_shape": list(spec.in_shape),
              "num_classes": spec.num_classes, **meta}
    arrays = {name: np.asarray(value) for name, value in state.items()}
    arrays[META] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise MultidevError(f"cannot write checkpoint {path}: {exc.strerror}; choose a writable folder") from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load(path: str | Path) -> tuple[ModelSpec, State, dict[str, Any]]:
    """(spec, state, meta) from a checkpoint; a bad file is a one-line error."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise MultidevError(f"checkpoint {path} does not exist: check the path given to --resume") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise MultidevError(f"checkpoint {path} is unreadable ({exc}): use another checkpoint") from None
    if META not in arrays:
        raise MultidevError(f"{path} is not a multidev checkpoint (no {META} entry)")
    meta = json.loads(arrays.pop(META).tobytes().decode())
    if meta.get("format") != FORMAT:
        raise MultidevError(f"{path} has format {meta.get('format')!r}; this multidev reads {FORMAT}")
    spec = ModelSpec(meta["model"], tuple(meta["in_shape"]), int(meta["num_classes"]))
    state = {p.name: arrays[p.name] for p in spec.params() if p.name in arrays}
    spec.check(arrays)
    return spec, state, meta
