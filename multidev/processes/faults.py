"""What a launcher does when a worker dies or a signal arrives: start the job again from its checkpoint, or stop.

A launcher that restarts its workers (torch's elastic agent; multidev's own
for JAX and MXNet) sets ``TORCHELASTIC_RESTART_COUNT`` in each: 0 at the first
start, k after the k-th restart. A restarted worker resumes from the job's
``--checkpoint`` when rank 0 wrote it since the job began: the launcher puts
the file's identity at launch in ``CHECKPOINT_AT_LAUNCH``, so a file left by
an earlier job is not taken for this one's (contract: Restarts).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional

from multidev.outputs import checkpoint as ckpt

RESTART_COUNT, MAX_RESTARTS = "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"
CHECKPOINT_AT_LAUNCH = "MULTIDEV_CHECKPOINT_AT_LAUNCH"
ABSENT = "absent"


def how(code: int) -> str:
    """How a process ended, from its exit ``code`` (negative: the signal that killed it)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def identity(path: Optional[str]) -> str:
    """A checkpoint file as it is now: replaced atomically, a new save is a new inode (and time)."""
    try:
        found = os.stat(path) if path else None
    except OSError:
        found = None
    return ABSENT if found is None else f"{found.st_ino}:{found.st_mtime_ns}:{found.st_size}"


def restart_count(env: Optional[Mapping[str, str]] = None) -> int:
    """How many times this worker's job has been started again (0: the first start, or no launcher)."""
    text = (os.environ if env is None else env).get(RESTART_COUNT, "0").strip()
    return int(text) if text.isdigit() else 0


def will_restart(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this worker's launcher starts the job again when it fails (a restart is left)."""
    text = (os.environ if env is None else env).get(MAX_RESTARTS, "0").strip()
    return restart_count(env) < (int(text) if text.isdigit() else 0)


def written_by_this_job(path: Optional[str], env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``path`` holds a checkpoint saved since the job was launched (any file, under another launcher)."""
    now = identity(path)
    return now != ABSENT and now != (os.environ if env is None else env).get(CHECKPOINT_AT_LAUNCH)


@dataclass(frozen=True)
class Restart:
    """One restart of a job, as the JSON result records it."""

    attempt: int  # 1 for the first restart
    failed: str   # what died first: "worker rank 1", "mxnet server"
    how: str      # "was killed by SIGKILL"
    epoch: int    # where the job goes on
    step: int


def restart(attempt: int, of: int, failed: str, code: int, checkpoint: Optional[str]) -> Restart:
    """Say in one line that ``failed`` ended with exit ``code`` and the job starts again; the record of it."""
    epoch, step = ckpt.resumes_at(checkpoint) if written_by_this_job(checkpoint) else (1, 0)
    record = Restart(attempt, failed, how(code), epoch, step)
    print(f"multidev: {failed} {record.how}: restart {attempt} of {of}, from epoch {epoch}, step {step}",
          file=sys.stderr, flush=True)
    return record


class JobStopped(KeyboardInterrupt):
    """The launcher passed SIGINT or SIGTERM on; every worker stopped at a step boundary and rank 0 saved."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def resumes_at(checkpoint: Optional[str]) -> tuple[int, int]:
    """(epoch, step) a stopped job goes on from (1, 0 when it saved nothing)."""
    return ckpt.resumes_at(checkpoint) if checkpoint and Path(checkpoint).is_file() else (1, 0)


@contextlib.contextmanager
def launched_with(checkpoint: Optional[str]) -> Iterator[None]:
    """The checkpoint file as it is when the job starts, for its workers to tell their own job's saves from it."""
    before = os.environ.get(CHECKPOINT_AT_LAUNCH)
    os.environ[CHECKPOINT_AT_LAUNCH] = identity(checkpoint)
    try:
        yield
    finally:
        if before is None:
            del os.environ[CHECKPOINT_AT_LAUNCH]
        else:
            os.environ[CHECKPOINT_AT_LAUNCH] = before
