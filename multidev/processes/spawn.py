"""A launcher for frameworks that bring none: start the workers, watch them, end the job when one fails.

JAX's ``jax.distributed.initialize`` connects processes but starts none, and
its survivors of a dead process wait for the heartbeat timeout (100 s by
default); MXNet's parameter server needs a scheduler and servers beside the
workers, and waits forever on a dead worker. So an engine on such a runtime
launches through this module: one ``python -m multidev`` per worker with
torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) and the engine's own, plus the helper
processes it names, all polled every 0.1 s; the first that fails has the
others stopped at once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from multidev.errors import MultidevError
from multidev.processes.launch import Launch, parse_master

#: seconds a stopped worker gets to save and leave before it is killed
GRACE = 60.0


def _how(code: int) -> str:
    """How a process ended, from its exit ``code`` (negative: the signal that killed it)."""
    if code >= 0:
        return f"exited with code {code} (its own error line is above)"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def cause(failures: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Of the workers seen failing together, as (rank, exit code) in the order they failed, the one to name.

    A worker killed by a signal (not the SIGTERM a launcher sends the rest) is
    the cause; a worker that then exits with an error of its own only lost its
    peer, and may be seen first when both end within one poll.
    """
    killed = [f for f in failures if f[1] < 0 and f[1] != -signal.SIGTERM]
    return (killed or list(failures))[0]


def worker_failed(rank: int, code: int) -> MultidevError:
    """The one line a launcher ends a job with when worker ``rank`` ended with exit ``code`` (negative: a signal)."""
    return MultidevError(f"worker rank {rank} {_how(code)}: the job was stopped (a checkpoint on disk is whole: "
                         f"--resume it)")


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


def spawn(argv: Sequence[str], launch: Launch, env: Mapping[str, str] | None = None,
          helpers: Sequence[Helper] = ()) -> None:
    """Run ``python -m multidev <argv>`` as this machine's workers of the job; return when all have finished.

    ``env`` is added to every worker's environment, and ``helpers`` run beside
    them until the workers are done (they are then given ``GRACE`` seconds to end).
    """
    host, port = parse_master(launch.master)
    if launch.node_rank == 0:
        check_port(launch.master)
    served = [_start(helper.argv, helper.env) for helper in helpers]
    workers = [_start(["multidev", *argv], dict(env or {}, RANK=str(launch.node_rank * launch.processes + local),
                                                WORLD_SIZE=str(launch.size), LOCAL_RANK=str(local),
                                                LOCAL_WORLD_SIZE=str(launch.processes), MASTER_ADDR=host,
                                                MASTER_PORT=str(port)))
               for local in range(launch.processes)]
    try:
        while True:
            codes = [w.poll() for w in workers]
            failed = [(launch.node_rank * launch.processes + i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                _stop(workers + served, signal.SIGKILL, 5.0)  # the rest would wait on the dead one
                raise worker_failed(*cause(failed))
            broken = [(h, p.returncode) for h, p in zip(helpers, served) if p.poll() not in (None, 0)]
            if broken:
                _stop(workers + served, signal.SIGKILL, 5.0)
                helper, code = broken[0]
                raise MultidevError(f"the {helper.name} {_how(code)}: the job was stopped (a checkpoint on disk is "
                                    f"whole: --resume it)")
            if all(c == 0 for c in codes):
                _stop(served, 0, GRACE)  # they end once every machine's workers have said goodbye
                return
            time.sleep(0.1)
    except KeyboardInterrupt:  # every worker stops at the same step boundary; rank 0 saves
        _stop(workers, signal.SIGINT, GRACE)
        _stop(served, 0, GRACE)
        raise
    finally:
        _stop(workers + served, signal.SIGKILL, 5.0)
