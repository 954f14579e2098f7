"""Where a run writes, checked before it trains: each output a place of its own that can be written.

A mistyped flag must not cost a run's work or the user's files: an output
that is also an input (``--checkpoint data.npz``), two outputs on one file,
or a checkpoint written over a file multidev did not write would each lose
something, so each is one line before anything starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from multidev.errors import MultidevError


def writable(path: Optional[str], flag: str) -> None:
    """Fail before training, not after it, when an output file cannot be written."""
    if path is None:
        return
    folder = Path(path).parent
    if Path(path).is_dir():
        raise MultidevError(f"{flag} {path} is a folder: give a file name")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise MultidevError(f"{flag} {path}: folder {folder} does not exist or is not writable")


def _folder(path: Optional[str], flag: str) -> None:
    """An output folder (made when the run starts): not a file, and its nearest existing parent writable."""
    if path is None:
        return
    if Path(path).exists() and not Path(path).is_dir():
        raise MultidevError(f"{flag} {path} is a file: give a folder")
    if Path(path).exists():
        return
    parent = next((p for p in Path(path).absolute().parents if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK):
        raise MultidevError(f"{flag} {path}: folder {parent} is not writable")


def _same(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _within(path: str, folder: str) -> bool:
    return Path(folder).expanduser().resolve() in Path(path).expanduser().resolve().parents


#: what an output flag writes, by the file names it may replace (a file of another kind is the user's own)
SUFFIXES = {"--json": (".json",), "--plot": (".png",), "--onnx": (".onnx",)}


def check_paths(files: Mapping[str, Optional[str]], folders: Mapping[str, Optional[str]],
                inputs: Mapping[str, Optional[str]], checkpoint: Optional[str] = None) -> None:
    """One line for an output that cannot be written, is another output, is an input or lies inside an input
    folder, or would replace a file of another kind.

    ``files`` and ``folders`` are outputs by flag, ``inputs`` the files and
    folders read, by flag or name (the run's own ``--checkpoint`` may also be
    ``--resume``'s); ``checkpoint`` is the flag among ``files`` that holds
    checkpoints.
    """
    for flag, path in files.items():
        writable(path, flag)
    for flag, path in folders.items():
        _folder(path, flag)
    outputs = [(flag, path) for flag, path in {**files, **folders}.items() if path is not None]
    for i, (flag, path) in enumerate(outputs):
        other = next((f for f, p in outputs[:i] if _same(p, path)), None)
        if other is not None:
            raise MultidevError(f"{flag} {path} is also {other}'s file: give each output a file of its own")
        read = next((f for f, p in inputs.items() if p is not None and _same(p, path)), None)
        if read is not None and not (flag == checkpoint and read == "--resume"):
            what = f"{read}'s file" if read.startswith("--") else read
            raise MultidevError(f"{flag} {path} is also {what}: writing it would replace it; give another file name")
        inside = next((f for f, p in inputs.items() if p is not None and Path(p).is_dir() and _within(path, p)), None)
        if inside is not None:
            raise MultidevError(f"{flag} {path} lies inside {inside}'s folder {inputs[inside]}: writing there changes "
                                f"your data; give a path outside it")
        if Path(path).is_file() and flag in SUFFIXES and not path.endswith(SUFFIXES[flag]):
            raise MultidevError(f"{flag} {path} exists and is no {SUFFIXES[flag][0]} file: give a file name ending in "
                                f"{SUFFIXES[flag][0]}, or move that file away")
    saved = files.get(checkpoint) if checkpoint else None
    if saved is not None and Path(saved).is_file():
        from multidev.outputs.checkpoint import is_checkpoint
        if not is_checkpoint(saved):
            raise MultidevError(f"{checkpoint} {saved} exists and is not a multidev checkpoint: give another file "
                                f"name, or move that file away")
