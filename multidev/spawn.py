"""A launcher for frameworks that bring none: start the workers, watch them, end the job when one fails.

JAX's ``jax.distributed.initialize`` connects processes but starts none, and
its survivors of a dead process wait for the heartbeat timeout (100 s by
default). So an engine on such a runtime launches through this module: one
``python -m multidev`` per worker with torchrun's variables (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), polled
every 0.1 s; the first worker that fails has the others stopped at once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Sequence

from .errors import MultidevError
from .group import Launch, parse_master

#: seconds a stopped worker gets to save and leave before it is killed
GRACE = 60.0


def worker_failed(rank: int, code: int) -> MultidevError:
    """The one line a launcher ends a job with when worker ``rank`` ended with exit ``code`` (negative: a signal)."""
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code} (its own error line is above)"
    return MultidevError(f"worker rank {rank} {how}: the job was stopped (a checkpoint on disk is whole: --resume it)")


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
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(how)
    deadline = time.monotonic() + grace
    for worker in workers:
        try:
            worker.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def spawn(argv: Sequence[str], launch: Launch) -> None:
    """Run ``python -m multidev <argv>`` as this machine's workers of the job; return when all have finished."""
    host, port = parse_master(launch.master)
    if launch.node_rank == 0:
        check_port(launch.master)
    workers = []
    for local in range(launch.processes):
        env = dict(os.environ, RANK=str(launch.node_rank * launch.processes + local), WORLD_SIZE=str(launch.size),
                   LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(launch.processes), MASTER_ADDR=host,
                   MASTER_PORT=str(port))
        # A session of its own: a Ctrl-C in the terminal reaches the launcher alone, which passes one SIGINT on.
        workers.append(subprocess.Popen([sys.executable, "-m", "multidev", *argv], env=env, start_new_session=True))
    try:
        while True:
            codes = [w.poll() for w in workers]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                local, code = failed[0]
                _stop(workers, signal.SIGKILL, 5.0)  # the rest would wait on the dead one
                raise worker_failed(launch.node_rank * launch.processes + local, code)
            if all(c == 0 for c in codes):
                return
            time.sleep(0.1)
    except KeyboardInterrupt:  # every worker stops at the same step boundary; rank 0 saves
        _stop(workers, signal.SIGINT, GRACE)
        raise
    finally:
        _stop(workers, signal.SIGKILL, 5.0)
