"""Engine discovery through the ``multidev.backends`` entry-point group.

First-party engines register exactly like third-party ones. Nothing is
imported until an engine is asked for, so one broken engine cannot break
``import multidev``.
"""

from __future__ import annotations

from importlib import metadata
from typing import Optional

from multidev.engines.capabilities import CAPABILITIES
from multidev.engines.protocol import Backend
from multidev.errors import BackendNotInstalled, MultidevError

GROUP = "multidev.backends"


#: Engines the project ships, with how to install each.
FIRST_PARTY = {
    "torch": "pip install -c constraints.txt ./backends/torch",
    "jax": "pip install -c constraints.txt ./backends/jax",
    "mxnet": "pip install -c constraints.txt ./backends/mxnet",
}


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def installed() -> list[str]:
    """Names of the engines registered in this environment."""
    return sorted(_entry_points())


def distribution(name: str) -> Optional[str]:
    """``package version`` of the installed distribution that registers engine ``name``."""
    ep = _entry_points().get(name)
    return f"{ep.dist.name} {ep.dist.version}" if ep is not None and ep.dist is not None else None


def engine_version(engine: Backend) -> str:
    """The engine's package and its frameworks' versions, for reports, from the installed metadata.

    Nothing is imported, so listing engines loads no framework.
    """
    parts = [distribution(engine.name) or f"{engine.name} (not installed)"]
    for name in engine.frameworks:
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name} (not installed)")
    return ", ".join(parts)


def load_backend(name: str) -> Backend:
    """The engine called ``name``, or a one-line error saying how to get it."""
    eps = _entry_points()
    if name not in eps:
        if name in FIRST_PARTY:
            raise BackendNotInstalled(f"the {name} engine is not installed: run `{FIRST_PARTY[name]}`")
        known = ", ".join(sorted(set(eps) | set(FIRST_PARTY)))
        raise MultidevError(f"unknown backend {name!r}: choose one of {known}")
    try:
        factory = eps[name].load()
        backend = factory()
    except ImportError as exc:
        hint = FIRST_PARTY.get(name, f"reinstall the package that provides {name!r}")
        raise BackendNotInstalled(f"the {name} engine cannot import {exc.name or exc}: run `{hint}`") from None
    unknown = set(backend.capabilities) - CAPABILITIES
    if unknown:
        raise MultidevError(f"the {name} engine claims unknown capabilities {sorted(unknown)}")
    return backend
