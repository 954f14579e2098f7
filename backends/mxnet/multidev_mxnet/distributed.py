"""One process per device (or per few) on MXNet's own runtime: the distributed kvstore (``dist_sync``).

MXNet's parameter server (ps-lite, built into the wheel) has three roles: a
scheduler on machine 0 where everyone meets, servers that sum what the
workers push, and the workers. The core's launcher starts all three with
MXNet's ``DMLC_*`` variables (MXNet's own ``tools/launch.py`` fails on Python
3.11): the scheduler on machine 0 at ``--master``, one server on each
machine, and the workers. Each worker opens one ``dist_sync`` kvstore and
every sum of the job goes through it: gradients, running statistics and the
core's ``all_sum``.

A kvstore waits forever on a dead worker. On one machine the launcher is the
watchdog: the first process that fails has the others stopped. Across
machines ps-lite's heartbeats are: the scheduler ends when a worker misses
them for ``DEAD_AFTER`` seconds, and every worker ends when the scheduler
does, so each machine's launcher stops its own processes. Servers watch
nothing: a server that dies fails its machine's launcher, which stops that
machine's workers, and a server outlives no worker of its machine by more
than the launcher's grace (a server's watch of the scheduler ended healthy
jobs twice on 2 loaded cores, at 20 s and at 60 s, where no worker missed a
heartbeat).

float64: MXNet's server (1.9.1, and its master) never initialises its
``multi_precision_`` flag (src/kvstore/kvstore_dist_server.h), and found set,
as the wheel's server found it, it stores and sums every non-float32 key in
float32: a float64 key initialised with 0.1 was pulled back as 0.10000000149,
and a float64 ResNet-18 epoch with ``--processes 2`` left ``--devices 2`` by
2.2e-6 (measured). So the launcher starts each server with glibc's allocator
handing out zeroed memory (``ZEROED_HEAP``), which leaves the flag off, and
``join`` checks on every server that float64 comes back whole
(``carries_float64``), with a warning where it does not.

``launch``, ``join``, ``leave`` and ``all_sum`` are the four every engine's
distributed.py defines, with the same signatures (the backend forwards to
them through ``multidev.engine.MultiProcess``); ``kvstore`` and
``ensure_keys`` are what this engine's replicas sum through.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
import warnings
from typing import Callable, Optional, Sequence

import numpy as np

from multidev.engine import (Helper, HostSum, Launch, MultidevError, ProcessGroup, Restart, first_line, spawn,
                             will_restart)

from .runtime import mxnet

#: kvstore keys: the trainable parameters' gradients from 0, the running statistics and the core's sums apart
STATISTIC_KEYS = 100_000
SUM_KEY = 200_000
#: float64s one sum carries; longer arrays go in several. One key of one shape, made at join: a key made
#: while pushes are in flight makes ps-lite abort the worker (measured: MXNet 1.9.1)
SUM_WIDTH = 64

#: glibc's malloc without its per-thread cache, filling each block with 255 ^ 0xff = 0 (other libcs ignore it)
ZEROED_HEAP = "glibc.malloc.tcache_count=0:glibc.malloc.perturb=255"
#: the key join checks float64 with, and the size past which MXNet spreads a key over every server
PROBE_KEY = 300_000
BIGARRAY_ENV, BIGARRAY_DEFAULT = "MXNET_KVSTORE_BIGARRAY_BOUND", 1_000_000

#: the role of a helper process (multidev_mxnet.serve): not DMLC_ROLE, with which MXNet serves as it loads
ROLE_ENV = "MULTIDEV_MXNET_ROLE"
#: ps-lite's node groups (ps/base.h), for MXKVStoreGetNumDeadNode
SCHEDULER, WORKERS = 1, 4
#: seconds between heartbeats, and without one before a worker or the scheduler counts as dead
HEARTBEAT_SECONDS, DEAD_AFTER = 1, 20
#: seconds a worker waits for the scheduler and every other process (JAX's own initialization_timeout)
JOIN_SECONDS = 300

_open: dict[str, object] = {}   # "kv": this worker's dist_sync kvstore while it is in a job; "unwatch"
_keys: set[int] = set()          # keys initialised on it (every rank initialises the same keys in the same order)


def environment(launch: Launch) -> dict[str, str]:
    """What every process of the job reads to find the scheduler: machine 0 at ``--master``."""
    host, _, port = launch.master.rpartition(":")
    return {"DMLC_PS_ROOT_URI": host, "DMLC_PS_ROOT_PORT": port, "DMLC_NUM_SERVER": str(launch.nnodes),
            "DMLC_NUM_WORKER": str(launch.size), "PS_HEARTBEAT_INTERVAL": str(HEARTBEAT_SECONDS)}


def launch(argv: Sequence[str], launch: Launch) -> list[Restart]:
    """``python -m multidev <argv>`` as ``launch.processes`` workers, with this machine's server (and scheduler)."""
    serve = ["multidev_mxnet.serve", "--", *argv]  # the job's arguments only name it in `ps`

    def prepare(here: Launch) -> tuple[dict[str, str], list[Helper]]:  # each start meets at a port of its own
        common = environment(here)
        server = dict(common, GLIBC_TUNABLES=":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), ZEROED_HEAP])))
        helpers = [Helper("mxnet server", serve, dict(server, **{ROLE_ENV: "server"}))]
        if here.node_rank == 0:
            helpers.insert(0, Helper("mxnet scheduler", serve, dict(common, **{ROLE_ENV: "scheduler"})))
        return dict(common, DMLC_ROLE="worker"), helpers

    return spawn(argv, launch, prepare)


def join(group: ProcessGroup, local_rank: int) -> None:
    """Open this worker's ``dist_sync`` kvstore (the launcher's ``DMLC_*`` variables say where the scheduler is)."""
    mx = mxnet()
    waiting = threading.Timer(JOIN_SECONDS, unreached, args=(group.rank,))
    waiting.daemon = True
    waiting.start()
    try:
        kv = mx.kv.create("dist_sync")
    except mx.base.MXNetError as exc:
        raise MultidevError(f"rank {group.rank} could not open MXNet's dist_sync kvstore: "
                            f"{first_line(exc)[:200]}; start workers with `multidev train "
                            f"--processes N`, which starts the scheduler and servers too") from None
    finally:
        waiting.cancel()
    if kv.num_workers != group.size:
        raise MultidevError(f"MXNet's scheduler counts {kv.num_workers} workers, the launcher started {group.size}: "
                            f"set DMLC_NUM_WORKER to the job's process count")
    _open["kv"], _open["unwatch"] = kv, watch(kv, SCHEDULER, f"rank {group.rank} lost the mxnet scheduler")
    if not carries_float64(kv):
        warnings.warn("MXNet's parameter server rounds float64 to float32 here (its multi_precision_ flag is "
                      "uninitialised, and the zeroed heap the launcher asks glibc for did not clear it): float64 "
                      "sums across processes are float32's")
    ensure_keys([SUM_KEY], [mx.nd.zeros((SUM_WIDTH,), dtype="float64")])


def unreached(rank: int) -> None:
    """End a worker that met no job in ``JOIN_SECONDS``: ps-lite would wait for the scheduler for ever."""
    where = f"{os.environ.get('DMLC_PS_ROOT_URI')}:{os.environ.get('DMLC_PS_ROOT_PORT')}"
    print(f"multidev: error: rank {rank} met no MXNet job at {where} in {JOIN_SECONDS} s: start machine 0 "
          f"(--node-rank 0) with the same --master, and every machine with the same --nnodes",
          file=sys.stderr, flush=True)
    os._exit(1)


def carries_float64(kv) -> bool:
    """Whether every server keeps float64 as float64 (see the module): a key of 0.1s, spread over all, pulled back."""
    mx = mxnet()
    probe = mx.nd.full((int(os.environ.get(BIGARRAY_ENV, BIGARRAY_DEFAULT)),), 0.1, dtype="float64")
    kv.init(PROBE_KEY, probe)
    kv.pull(PROBE_KEY, out=probe)
    return bool((probe.asnumpy() == 0.1).all())


def watch(kv, nodes: int, says: str) -> Callable[[], None]:
    """End this process, with one line, once one of ``nodes`` has sent no heartbeat for ``DEAD_AFTER`` s.

    Returns the call that stops watching; it must come before ``kv`` is freed.
    """
    if "PS_HEARTBEAT_INTERVAL" not in os.environ:
        return lambda: None  # no heartbeats (a job started by hand): nothing to watch
    lib, handle, stop, busy = mxnet().base._LIB, kv.handle, threading.Event(), threading.Lock()

    def check() -> None:
        dead = ctypes.c_int()
        while not stop.wait(HEARTBEAT_SECONDS):
            with busy:
                if stop.is_set() or lib.MXKVStoreGetNumDeadNode(handle, nodes, ctypes.byref(dead), DEAD_AFTER):
                    continue
            if dead.value:  # exit 2, as a lost peer's multidev error: the launcher names the process that ended
                if will_restart():  # the launcher names what ended and starts the job again: nothing to add
                    os._exit(2)
                print(f"multidev: error: {says.format(n=dead.value)} (no heartbeat for {DEAD_AFTER} s): another "
                      f"process of the job ended; its machine's launcher says which", file=sys.stderr, flush=True)
                os._exit(2)

    def stopped() -> None:
        with busy:
            stop.set()

    threading.Thread(target=check, name="multidev-mxnet-watch", daemon=True).start()
    return stopped


def leave() -> None:
    """Close the kvstore: its goodbye to the scheduler lets the servers and the scheduler end."""
    if "unwatch" in _open:
        _open["unwatch"]()
    _open.clear()
    _keys.clear()
    gc.collect()  # nothing else may hold it: the handle is freed, and ps-lite finalised, here


def kvstore():
    """This worker's ``dist_sync`` kvstore."""
    if "kv" not in _open:
        raise MultidevError("this process is not in a job: join() first")
    return _open["kv"]


def ensure_keys(keys: Sequence[int], values: Sequence) -> None:
    """Initialise the keys not yet on the servers (a collective: every rank calls it alike)."""
    new = [(k, v) for k, v in zip(keys, values) if k not in _keys]
    if new:
        kvstore().init([k for k, _ in new], [v for _, v in new])
        _keys.update(k for k, _ in new)


def host_sum(numel: int, dtype: np.dtype, group: ProcessGroup) -> Optional[HostSum]:
    """A sum of ``numel`` values through this machine's shared memory (a collective), or None where it cannot be.

    Where every worker is on this machine (multidev.processes.hostsum), a pushpull of ResNet-18's gradients
    through the server took 170 ms on an Intel Xeon of 2 cores; ordered by the kvstore's own barrier.
    """
    return HostSum.open(numel, dtype, group, kvstore()._barrier, all_sum)  # noqa: SLF001 - MXNet's own barrier


def all_sum(values: np.ndarray) -> np.ndarray:
    """``values`` summed over every process of the job, float64, through the kvstore's sum key."""
    mx = mxnet()
    flat = np.asarray(values, np.float64).ravel()
    summed = np.zeros(-(-len(flat) // SUM_WIDTH) * SUM_WIDTH)
    summed[:len(flat)] = flat
    out = mx.nd.zeros((SUM_WIDTH,), dtype="float64")
    for start in range(0, len(summed), SUM_WIDTH):
        kvstore().pushpull(SUM_KEY, mx.nd.array(summed[start:start + SUM_WIDTH], dtype="float64"), out=out)
        summed[start:start + SUM_WIDTH] = out.asnumpy()
    return summed[:len(flat)].reshape(np.shape(values))

