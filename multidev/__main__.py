import logging
import os
import sys
import traceback

from multidev.cli import main
from multidev.errors import MultidevError
from multidev.processes.group import from_environment
from multidev.training.run import ends_at_once

try:
    joined = from_environment()
except MultidevError:  # a bad RANK or WORLD_SIZE: main says so in one line
    joined = None
worker = joined is not None and joined.group.size > 1
if worker:
    ends_at_once()
try:
    code = main()
except Exception:
    if not worker:
        raise
    traceback.print_exc()  # an error of this worker alone: said here, then out at once below, not at the peers' pace
    code = 1
if worker:
    # A worker's work is done and written (rank 0's files are saved atomically before this point). It ends
    # here, without the interpreter's teardown: torch's gloo threads can abort that teardown (SIGABRT,
    # "terminate called without an active exception", about 1 run in 20 of a two-machine job here), the
    # launcher would then report a failed worker after a job that succeeded; and a worker that failed alone
    # would wait in JAX's exit handler (its shutdown barrier) for peers that wait for it.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
