import logging
import os
import sys

from multidev.cli import main
from multidev.processes.group import from_environment

code = main()
joined = from_environment()
if joined is not None and joined.group.size > 1:
    # A worker's work is done and written (rank 0's files are saved atomically before this point). It ends
    # here, without the interpreter's teardown: torch's gloo threads can abort that teardown (SIGABRT,
    # "terminate called without an active exception", about 1 run in 20 of a two-machine job here), and
    # the launcher would then report a failed worker after a job that succeeded.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
