"""One compilation for all of a job's processes: rank 0 compiles each step, the others load its executable.

JAX can do this itself (``jax_share_binary_between_hosts``: the first process
compiles and hands the executable to the others through the job's key-value
store, and its persistent cache then holds it for every rank), but on the CPU
each process computes another cache key for the same program, because the
key holds the CPU topology as that process sees it (which devices are its
own). The others then wait for a key rank 0 never writes, and a job of two
processes hung (JAX 0.7.1); with sharing off, rank 1 compiled every step
on every run, cache or not, since JAX writes persistent entries from rank 0
only.

So where every process of the job runs on the same kind of CPU with the
cache on (the processes compare the cache folder's CPU tag through the
key-value store, all or none share),
the topology part of the key is replaced by what all processes see alike:
each device's global id, process and kind, and the CPU tag. An executable is
machine code: where the CPUs differ, every process compiles its own, as
before. All of it rests on two private JAX names; where they are missing
(another JAX), nothing is shared and ``note`` says so.
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from multidev.engine import cpu_tag

from . import compile_cache

_state: list[str] = []   # this process's note, once decided
_VOTE_KEY = "multidev/share-compilation/{rank}"
VOTE_WAIT_MS = 120_000  # every process votes right after joining


def _same_key_for_all(tag: str) -> Callable[[Any, Any], None]:
    def hash_devices(hash_obj: Any, devices: Any) -> None:
        for device in devices.flat:
            hash_obj.update(f"{device.id}/{device.process_index}/{device.device_kind};".encode())
        hash_obj.update(tag.encode())
    return hash_devices


def _votes(client: Any, rank: int, size: int, vote: str) -> set[str]:
    """Every process's vote (its CPU tag, or "no"): sharing is all or none, or a process would wait for ever."""
    client.key_value_set(_VOTE_KEY.format(rank=rank), vote)
    return {client.blocking_key_value_get(_VOTE_KEY.format(rank=r), VOTE_WAIT_MS) for r in range(size)}


def share(rank: int, size: int) -> str:
    """After ``jax.distributed.initialize``: share compilations if every process can and has this CPU."""
    if _state or size < 2 or jax.default_backend() != "cpu":
        return note()
    try:
        from jax._src import cache_key
        from jax._src.distributed import global_state
        cache_key._hash_accelerator_config  # noqa: B018 - present in the JAX this rests on
    except (ImportError, AttributeError):
        _state.append("not shared (this JAX lacks the names it rests on): every process compiles")
        return note()
    tag = cpu_tag() if compile_cache.folder() is not None else "no"
    votes = _votes(global_state.client, rank, size, tag)
    if votes != {tag} or tag == "no":
        why = "the compilation cache is off in a process" if "no" in votes else "the job's machines' CPUs differ"
        _state.append(f"not shared ({why}): every process compiles its own")
        return note()
    cache_key._hash_accelerator_config = _same_key_for_all(tag)  # the tag is a hash of the CPU's description
    jax.config.update("jax_share_binary_between_hosts", True)
    _state.append("shared: rank 0 compiles each step, the other processes load its executable")
    return note()


def note() -> str:
    return _state[0] if _state else "each process compiles (a job of one process, or not started yet)"
