"""Every file multidev writes goes through here: whole or not at all, with the user's umask.

A file is written to a temporary name beside its target, flushed, fsynced
and renamed over it, so a crash or a kill mid-write leaves the previous file
whole. The temporary name carries the writer's process id, so the next save
of the same target can remove what a killed writer left behind without
touching the file of a writer that is still alive.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from multidev.errors import MultidevError


def _umask() -> int:
    mask = os.umask(0o022)  # the only portable way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Delete ``.NAME.PID.*.tmp`` files beside ``target`` whose writer process is gone."""
    removed = []
    for tmp in target.parent.glob(f".{target.name}.*.tmp"):
        parts = tmp.name[len(target.name) + 2:].split(".")
        if parts and parts[0].isdigit() and int(parts[0]) != os.getpid() and not _alive(int(parts[0])):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed.append(tmp)
    return removed


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb", what: str = "file") -> Iterator[IO]:
    """Open a temporary file for ``path``; on success it replaces ``path`` with mode 0666 & ~umask."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    remove_stale_temporaries(folder / path.name)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    except OSError as exc:
        raise MultidevError(f"cannot write {what} {path}: {exc.strerror}; choose a writable folder") from None
    try:
        with os.fdopen(fd, mode) as f:
            yield f  # the caller's own errors pass through unchanged
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp made it 0600
            os.replace(tmp, path)
        except OSError as exc:
            raise MultidevError(f"cannot write {what} {path}: {exc.strerror}; choose a writable path") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
