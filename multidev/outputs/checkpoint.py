"""One framework-neutral checkpoint format, written atomically (contract: Checkpoints and interruption).

A checkpoint is a NumPy ``.npz`` archive: every canonical array under its
canonical name, the optimizer's state under its canonical names
(``optimizer.*``, see ``multidev.optim``), plus ``__meta__``, a JSON
document (model and its definition as data, input shape, classes, epoch, seed, history, recipe). Any engine
reads it, and reading it never runs code (``allow_pickle=False``); a crash mid-write leaves the previous file
intact because the new one is renamed into place.
"""

from __future__ import annotations

import json
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any, Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn.graph import Graph
from multidev.outputs.files import atomic_write
from multidev.rules.models import ModelSpec, State
from multidev.rules.optimizers import STATE_PREFIX

VERSION = 2  # 2: may hold a mid-epoch position; 1 is read too


FORMAT = f"multidev-checkpoint/{VERSION}"


META = "__meta__"


def save(path: str | Path, spec: ModelSpec, state: State, optimizer_state: State | None = None, **meta: Any) -> Path:
    path = Path(path)
    spec.check(state)
    header = {"format": FORMAT, "model": spec.name, "definition": spec.graph.to_dict(),
              "in_shape": list(spec.in_shape), "num_classes": spec.num_classes, **meta}
    arrays = {name: np.asarray(value) for name, value in state.items()}
    arrays.update({name: np.asarray(value) for name, value in (optimizer_state or {}).items()})
    arrays[META] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with atomic_write(path, what="checkpoint") as f:
        np.savez(f, **arrays)
    return path


def _arrays(path: Path, only: Optional[str] = None) -> dict[str, np.ndarray]:
    if path.suffix == ".onnx":
        raise MultidevError(f"{path} is an ONNX file, not a checkpoint: give the .npz that --checkpoint wrote (an "
                            f"ONNX file trains with --model {path})")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files if only is None or name == only}
    except FileNotFoundError:
        raise MultidevError(f"checkpoint {path} does not exist: check its path") from None
    except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise MultidevError(f"checkpoint {path} is unreadable ({exc}): use another checkpoint") from None


def _header(arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], Optional[int]]:
    """The archive's JSON header (taken out of ``arrays``) and its format's number (None: no multidev checkpoint)."""
    try:
        meta = json.loads(arrays.pop(META).tobytes().decode())
        match = re.fullmatch(r"multidev-checkpoint/(\d+)", str(meta.get("format")))
    except (KeyError, ValueError, AttributeError):
        return {}, None
    return meta, int(match.group(1)) if match else None


def _meta(path: Path, arrays: dict[str, np.ndarray]) -> tuple[ModelSpec, dict[str, Any]]:
    meta, version = _header(arrays)
    if version is None:
        raise MultidevError(f"{path} is not a multidev checkpoint: give a file that --checkpoint wrote")
    if version > VERSION:
        raise MultidevError(f"{path} was written by a newer multidev (format {version}; this one reads "
                            f"{VERSION}): upgrade multidev to resume from it")
    # checkpoints from before definitions were stored name a zoo network
    graph = Graph.from_dict(meta["definition"]) if "definition" in meta else None
    return ModelSpec(meta["model"], tuple(meta["in_shape"]), int(meta["num_classes"]), graph), meta


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a file multidev wrote as a checkpoint (of any version): one that may be written over."""
    try:
        arrays = _arrays(Path(path), META)
    except MultidevError:
        return False
    return _header(arrays)[1] is not None


def spec_of(path: str | Path) -> ModelSpec:
    """The model a checkpoint holds (its definition, input shape and classes), without reading its arrays."""
    return _meta(Path(path), _arrays(Path(path), META))[0]


def meta_of(path: str | Path) -> dict[str, Any]:
    """What a checkpoint says of its run (epoch, seed, recipe, settings, ...), without reading its arrays."""
    return _meta(Path(path), _arrays(Path(path), META))[1]


def resumes_at(path: str | Path) -> tuple[int, int]:
    """(epoch, step): where a run resumed from this checkpoint goes on (step 0: the epoch's start)."""
    meta = meta_of(path)
    position = meta.get("position")
    return (int(position["epoch"]), int(position["step"])) if position else (int(meta["epoch"]) + 1, 0)


def _read(path: str | Path) -> tuple[ModelSpec, State, dict[str, Any]]:
    """(spec, every array, meta) of a checkpoint, read once and checked; a bad file is a one-line error."""
    arrays = _arrays(Path(path))
    spec, meta = _meta(Path(path), arrays)
    spec.check({name: value for name, value in arrays.items() if not name.startswith(STATE_PREFIX)})
    return spec, arrays, meta


def load(path: str | Path) -> tuple[ModelSpec, State, dict[str, Any]]:
    """(spec, state, meta) from a checkpoint; a bad file is a one-line error."""
    spec, arrays, meta = _read(path)
    return spec, {p.name: arrays[p.name] for p in spec.params()}, meta


def load_optimizer_state(path: str | Path) -> State:
    """The optimizer's state a checkpoint holds, under its canonical names (empty for plain SGD)."""
    return {name: value for name, value in _read(path)[1].items() if name.startswith(STATE_PREFIX)}
