"""Compiled steps kept whole beside the compilation cache: a later run loads a step without tracing or lowering it.

JAX's persistent cache (:mod:`.compile_cache`) spares XLA's compilation, but a
run still traces and lowers each step only to find its key: 0.7 s and 0.2 s
of ResNet-18's train step on 2 cores, a third of the first step's 3 s. So a
step this process compiled is also written whole
(``jax.experimental.serialize_executable``, 2.3 MB for that step), and a later
run loads it in 0.1 s. Its file is named by a hash of all the program rests on
besides the process's own key (:mod:`.compiled`: the step, the model, the
mesh, the optimizer, the forms, the shard length):

- the source of multidev and of this engine, and the versions of Python, JAX,
  jaxlib, Flax, Optax and NumPy;
- JAX's configuration, and the environment's ``MULTIDEV_``, ``XLA_``, ``JAX_``
  and ``OMP_`` variables;
- the devices, and each argument's shape, dtype and sharding.

The measured forms decided while it was traced and compiled (the BatchNorm
sums per shape, XLA's threads: :func:`.forms.choice.recording`) are kept with
it and asked again when it loads; where one would now be decided otherwise,
the step is traced afresh. Only a step XLA compiled in this process is
written: one JAX's cache handed back serializes without its functions and
fails when run (XLA:CPU, JAX 0.7.1). So a step to be kept is compiled with
JAX's cache bypassed (:func:`.compile_cache.bypassed`): after a change of
the source the first run compiles it once more, where JAX's cache would have
handed it back to that run and to every later one, each tracing it first.
Off where the cache is off, in a job of several processes, and with
``MULTIDEV_JAX_KEPT_STEPS=off``.

Every change of the source or a library is a new key, so the folder would
only grow: after each write the steps least recently used (a load refreshes a
file's time) go until the rest fit in :data:`BUDGET`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import pickle
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any, Hashable, Optional, Sequence

import jax

import multidev

from . import compile_cache
from .forms import CHOICES
from .forms.choice import Decision

ENV = "MULTIDEV_JAX_KEPT_STEPS"
_ENVIRONMENT = ("MULTIDEV_", "XLA_", "JAX_", "OMP_")
_LIBRARIES = ("jax", "jaxlib", "flax", "optax", "numpy")
#: bytes the kept steps may take (ResNet-18's train step: 2.3 MB)
BUDGET = 1 << 30
log = logging.getLogger("multidev.jax")


@lru_cache(maxsize=1)
def _code() -> str:
    """The versions and the source the programs are traced from, hashed once per process."""
    digest = hashlib.sha256(platform.python_version().encode())
    for name in _LIBRARIES:
        digest.update(f"{name}={importlib.metadata.version(name)};".encode())
    for package in (Path(multidev.__file__).parent, Path(__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _switched_off() -> bool:
    return os.environ.get(ENV, "").strip().lower() in compile_cache.OFF


def _folder() -> Optional[Path]:
    if _switched_off() or jax.process_count() > 1:
        return None
    folder = compile_cache.folder()
    return folder / "steps" if folder is not None else None


def note() -> str:
    """What ``multidev backends`` says: where steps are kept whole, or why none are."""
    if _switched_off():
        return f"off ({ENV}={os.environ[ENV].strip()}): every run traces its steps"
    folder = compile_cache.folder()
    if folder is None:
        return "off with the compilation cache: every run traces its steps"
    return (f"{folder / 'steps'}: a step XLA compiled is loaded whole by later runs, untraced (not in a job of "
            f"several processes; {ENV}=off traces every step)")


def _placed(a: Any) -> list[jax.Device]:
    """The devices an argument lies on, in its mesh's order (a sharding's text names no device)."""
    sharding = getattr(a, "sharding", None)
    if sharding is None:
        return []
    mesh = getattr(sharding, "mesh", None)
    return list(mesh.devices.flat) if mesh is not None else sorted(sharding.device_set, key=lambda d: d.id)


def _argument(a: Any) -> str:
    return f"{getattr(a, 'shape', ())}:{getattr(a, 'dtype', type(a).__name__)}:{getattr(a, 'weak_type', '')}:" \
           f"{getattr(a, 'sharding', None)}:{[d.id for d in _placed(a)]}"


def path(key: Hashable, args: Sequence[Any]) -> Optional[Path]:
    """Where the step of ``key`` compiled for ``args`` is kept, or None where none is."""
    folder, named = _folder(), repr(key)
    if folder is None or " at 0x" in named:  # an object with no stable description: never kept
        return None
    leaves, tree = jax.tree.flatten(args)
    environment = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENVIRONMENT))
    described = [_code(), named, str(tree), *map(_argument, leaves), repr(sorted(jax.config.values.items())),
                 repr(environment), repr([(d.id, d.platform, d.device_kind) for d in jax.devices()])]
    return folder / f"{hashlib.sha256(chr(0).join(described).encode()).hexdigest()[:32]}.pkl"


def _holds(decisions: Sequence[Decision]) -> bool:
    by_name = {choice.name: choice for choice in CHOICES.values()}
    return all(name in by_name and by_name[name].still(key, traits, form) for name, key, traits, form in decisions)


def load(where: Path, args: Sequence[Any]) -> Optional[jax.stages.Compiled]:
    """The kept step, or None: none kept, a form now decided otherwise, or it would not load."""
    from jax.experimental import serialize_executable

    try:
        kept = pickle.loads(where.read_bytes())
        if not _holds(kept["decisions"]) or kept["in_tree"] != jax.tree.structure((tuple(args), {})):
            return None
        devices = next(filter(None, map(_placed, jax.tree.leaves(args))))  # the program's, in its order
        loaded = serialize_executable.deserialize_and_load(kept["executable"], kept["in_tree"], kept["out_tree"],
                                                           execution_devices=devices)
        os.utime(where)  # used now: the last to go when the folder is pruned
        return loaded
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - another JAX's or a damaged file: trace the step instead
        log.debug("kept step %s not loaded: %s", where.name, exc)
        return None


def save(where: Path, compiled: jax.stages.Compiled, decisions: Sequence[Decision]) -> None:
    """Keep a step XLA just compiled (whole or not at all: other runs read the folder)."""
    from jax.experimental import serialize_executable

    try:
        executable, in_tree, out_tree = serialize_executable.serialize(compiled)
        payload = pickle.dumps({"executable": executable, "in_tree": in_tree, "out_tree": out_tree,
                                "decisions": list(decisions)})
        where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = where.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(payload)
        os.replace(temporary, where)
        prune(where.parent, BUDGET)
    except Exception as exc:  # noqa: BLE001 - a step that cannot be kept is traced again by the next run
        log.debug("step not kept: %s", exc)


def prune(folder: Path, budget: int) -> None:
    """Remove the kept steps least recently used until the rest take at most ``budget`` bytes."""
    kept = []
    for file in folder.glob("*.pkl"):
        try:
            stat = file.stat()
        except FileNotFoundError:  # another run pruned it meanwhile
            continue
        kept.append((stat.st_mtime, stat.st_size, file))
    total = sum(size for _, size, _ in kept)
    for _, size, file in sorted(kept):
        if total <= budget:
            break
        file.unlink(missing_ok=True)
        total -= size
