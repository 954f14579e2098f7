"""A launcher for frameworks that bring none: start the workers, watch them, end the job when one fails.

JAX's ``jax.distributed.initialize`` connects processes but starts none, and
its survivors of a dead process wait for the heartbeat timeout (100 s by
default); MXNet's parameter server needs a scheduler and servers beside the
workers, and waits forever on a dead worker. So an engine on such a runtime
launches through this module: one ``python -m multidev`` per worker with
torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) and the engine's own, plus the helper
processes it names, all polled every 0.1 s; the first that fails has the
others stopped at once, and with ``--max-restarts`` all start again (see
:mod:`multidev.processes.faults`). SIGINT and SIGTERM are passed on to the
workers, which stop at a step boundary.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

from multidev.errors import MultidevError
from multidev.processes.faults import MAX_RESTARTS, RESTART_COUNT, JobStopped, Restart, how, restart
from multidev.processes.launch import Launch, parse_master

#: seconds a stopped worker gets to save and leave before it is killed
GRACE = 60.0


def cause(failures: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Of the workers seen failing within one poll, as (rank, exit code), the one to name.

    A worker killed by a signal is the cause, but for the SIGTERM a launcher
    sends the rest and the SIGABRT with which JAX ends a process whose
    coordinator (rank 0's process) is gone; next a worker that failed with an
    error of its own (exit 1: a traceback, multidev/__main__.py); a worker
    that exits with a multidev error (2) may only have lost its peer (torch's
    and JAX's PeerLost, MXNet's heartbeat watcher). Among equals, the first
    listed (the lowest rank as a launcher lists them, or the first seen).
    """
    def order(failure: tuple[int, int]) -> int:
        code = failure[1]
        if code < 0 and code not in (-signal.SIGTERM, -signal.SIGABRT):
            return 0
        return {1: 1, -signal.SIGABRT: 2}.get(code, 3)

    return min(failures, key=order)  # the first seen among equals


def job_failed(what: str, code: int) -> MultidevError:
    """The one line a launcher ends a job with when ``what`` ended with exit ``code`` (negative: a signal)."""
    own = " (its own error line is above)" if code >= 0 else ""
    return MultidevError(f"{what} {how(code)}{own}: the job was stopped (a checkpoint it saved, if any, is whole: "
                         f"--resume it)")


def worker_failed(rank: int, code: int) -> MultidevError:
    return job_failed(f"worker rank {rank}", code)


def check_port(master: str) -> None:
    """Machine 0 must be able to listen at ``master``; a port in use is one line, not a worker's crash."""
    host, port = parse_master(master)
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise MultidevError(f"the workers could not meet at {master}: {exc.strerror.lower()}; check --master "
                                f"(a free port on machine 0, reachable from every machine)") from None


def _stop(workers: list[subprocess.Popen], how: int, grace: float) -> None:
    """Send ``how`` (0: nothing, only wait) to the processes still running; kill any left after ``grace`` s."""
    for worker in workers:
        if how and worker.poll() is None:
            worker.send_signal(how)
    deadline = time.monotonic() + grace
    for worker in workers:
        try:
            worker.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@dataclass(frozen=True)
class Helper:
    """A process that serves the workers (MXNet's scheduler, a parameter server): started first, ended last."""

    name: str                 # for the one line that ends the job if it fails
    argv: Sequence[str]       # what follows ``python -m``
    env: Mapping[str, str] = field(default_factory=dict)


def _start(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    # A session of its own: a Ctrl-C in the terminal reaches the launcher alone, which passes one SIGINT on.
    return subprocess.Popen([sys.executable, "-m", *argv], env=dict(os.environ, **env), start_new_session=True)


class _Signals:
    """SIGINT and SIGTERM while the job runs: the first is passed on to the workers, who stop at a step boundary
    and save; a second is passed on too, and ends them at once (contract: Checkpoints and interruption)."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.workers: list[subprocess.Popen] = []
        self._previous: dict = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._caught) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _caught(self, signum, frame) -> None:
        if self.signum is not None:  # the second: passed on at once (the first is, by the launcher's loop)
            for worker in self.workers:
                if worker.poll() is None:
                    worker.send_signal(signum)
        self.signum = signum


def _failure(workers: list[subprocess.Popen], served: list[subprocess.Popen], helpers: Sequence[Helper],
             first_rank: int) -> Optional[tuple[str, int]]:
    """What ended first, and its exit code, when a worker or a helper has failed; None while all is well."""
    failed = [(first_rank + i, w.returncode) for i, w in enumerate(workers) if w.poll() not in (None, 0)]
    if failed:
        rank, code = cause(failed)
        return f"worker rank {rank}", code
    broken = [(f"the {h.name}", p.returncode) for h, p in zip(helpers, served) if p.poll() not in (None, 0)]
    return broken[0] if broken else None


def _attempt(argv: Sequence[str], launch: Launch, env: Mapping[str, str], helpers: Sequence[Helper],
             signals: _Signals, attempt: int) -> Optional[tuple[str, int]]:
    """One start of this machine's workers (and helpers): None when all finished, else what failed first."""
    host, port = parse_master(launch.master)
    if launch.node_rank == 0:
        check_port(launch.master)
    started = {RESTART_COUNT: str(attempt), MAX_RESTARTS: str(launch.max_restarts)}  # as torch's agent sets them
    served = [_start(helper.argv, dict(helper.env, **started)) for helper in helpers]
    first = launch.node_rank * launch.processes
    workers = [_start(["multidev", *argv], dict(env, RANK=str(first + local), WORLD_SIZE=str(launch.size),
                                                LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(launch.processes),
                                                MASTER_ADDR=host, MASTER_PORT=str(port), **started))
               for local in range(launch.processes)]
    signals.workers = workers
    try:
        while signals.signum is None:
            failed = _failure(workers, served, helpers, first)
            if failed is not None:
                _stop(workers + served, signal.SIGKILL, 5.0)  # the rest would wait on the dead one
                return failed
            if all(w.poll() == 0 for w in workers):
                _stop(served, 0, GRACE)  # they end once every machine's workers have said goodbye
                return None
            time.sleep(0.1)
        _stop(workers, signals.signum, GRACE)  # every worker stops at a step boundary; rank 0 saves
        _stop(served, 0, GRACE)
        raise JobStopped(signals.signum)
    finally:
        _stop(workers + served, signal.SIGKILL, 5.0)


def _moved(master: str, attempt: int) -> str:
    """Where the ``attempt``-th start meets: the port after the last one's, so no survivor of it is met."""
    host, port = parse_master(master)
    return f"{host}:{port + attempt}"


Prepare = Callable[[Launch], tuple[Mapping[str, str], Sequence[Helper]]]


def spawn(argv: Sequence[str], launch: Launch, prepare: Optional[Prepare] = None) -> list[Restart]:
    """Run ``python -m multidev <argv>`` as this machine's workers of the job; return when all have finished.

    ``prepare(launch)`` gives what every worker's environment adds and the
    ``helpers`` that run beside them until the workers are done (they are
    then given ``GRACE`` seconds to end). When a worker or a helper fails,
    the rest are stopped and, up to ``launch.max_restarts`` times, all start
    again, the k-th time at ``--master``'s port + k; the restarts are returned.
    """
    restarts: list[Restart] = []
    with _Signals() as signals:
        for attempt in range(launch.max_restarts + 1):
            here = replace(launch, master=_moved(launch.master, attempt))
            env, helpers = prepare(here) if prepare is not None else ({}, ())
            failed = _attempt(argv, here, env, helpers, signals, attempt)
            if failed is None:
                return restarts
            what, code = failed
            if attempt == launch.max_restarts:
                raise job_failed(what, code)
            restarts.append(restart(attempt + 1, launch.max_restarts, what, code, launch.checkpoint))
    return restarts
