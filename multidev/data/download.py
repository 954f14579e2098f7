"""Data files fetched once into a cache folder, whole or not at all, and checked by their published MD5.

A download goes into a temporary file beside its target and is renamed into
place only when every byte has arrived, so an interrupted fetch never leaves
a half file that a later run would take for the real one. Every failure is
one line that tells the user which files to put where by hand, since
machines without network access are common where training runs.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from multidev.errors import MultidevError
from multidev.outputs.files import atomic_write

CHUNK = 1 << 20


def cache_dir(name: str) -> Path:
    """``$XDG_CACHE_HOME/multidev/<name>``, else ``~/.cache/multidev/<name>``: where downloads live by default.

    A relative ``XDG_CACHE_HOME`` is ignored, as the XDG spec asks, so the cache
    does not move with the working directory.
    """
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "multidev" / name


def md5(path: str | Path) -> str:
    """Hex MD5 of a file, read in chunks so a large archive never sits in memory whole."""
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path, published: str) -> None:
    """One line naming ``path`` when its MD5 is not the published one: a corrupt or foreign file must not load."""
    got = md5(path)
    if got != published:
        raise MultidevError(f"{path} fails its MD5 check (got {got}, published {published}): "
                            f"delete it and run again, or put the official file there")


def _reason(exc: BaseException) -> str:
    """Why a download failed, in one line: the HTTP status, the socket's complaint, or the error itself."""
    if isinstance(exc, urllib.error.HTTPError):
        exc.close()  # it holds the error page's open response
        return f"HTTP {exc.code} {exc.reason}"
    reason = getattr(exc, "reason", exc)
    lines = str(reason).strip().splitlines()
    return lines[0] if lines else type(reason).__name__


def fetch_url(url: str, target: Path, *, by_hand: Sequence[str] = (), source: str | None = None) -> None:
    """Fetch ``url`` into ``target`` atomically; on failure one line saying to put ``by_hand`` (default: the
    target's name) into the target's folder by hand. ``source`` is how the error shows where it fetched from.

    A transfer that ends before its announced length is a failure too, so a
    dropped connection is reported as such rather than later as a bad checksum.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MultidevError(f"cannot create data folder {target.parent}: {exc.strerror}; "
                            f"choose a writable folder") from None
    try:
        with atomic_write(target, what="data file") as out, urllib.request.urlopen(url, timeout=60) as response:
            announced, received = response.headers.get("Content-Length"), 0
            while chunk := response.read(CHUNK):
                out.write(chunk)
                received += len(chunk)
            if announced is not None and announced.isdigit() and int(announced) != received:
                raise OSError(f"connection closed after {received} of {announced} bytes")
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        files = ", ".join(by_hand) if by_hand else target.name
        raise MultidevError(f"cannot download {target.name} from {source or url} "
                            f"({_reason(exc)}): "
                            f"put {files} into {target.parent} by hand") from None
