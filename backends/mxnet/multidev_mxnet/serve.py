"""``python -m multidev_mxnet.serve``: MXNet's scheduler or a server of a job, as ``ROLE_ENV`` says.

MXNet serves as soon as it loads when ``DMLC_ROLE`` names a scheduler or a
server, before anything can watch the job. So the launcher passes the role
in a variable of multidev's own, and this program hands it to ps-lite's own
settings (``MXInitPSEnv``), never to the process environment, and then
serves, watched: ps-lite's heartbeats (``PS_HEARTBEAT_INTERVAL``, set by the
launcher) tell the scheduler when a worker of another machine is gone, and
it then ends, which ends the job everywhere (see :func:`.distributed.watch`).
The arguments after ``--`` are the job's, there only so that ``ps`` shows
which job a scheduler or server belongs to.
"""

import ctypes
import os
import sys

from .distributed import ROLE_ENV, WORKERS, watch
from .runtime import mxnet

role = os.environ.get(ROLE_ENV)
if role not in ("scheduler", "server") or "DMLC_ROLE" in os.environ:
    sys.exit(f"multidev_mxnet.serve runs MXNet's scheduler or a server: set {ROLE_ENV}, not DMLC_ROLE "
             f"(the launcher does)")
mx = mxnet()
keys, values = (ctypes.c_char_p * 1)(b"DMLC_ROLE"), (ctypes.c_char_p * 1)(role.encode())
mx.base.check_call(mx.base._LIB.MXInitPSEnv(ctypes.c_uint(1), keys, values))
kv = mx.kv.create("dist")
# the scheduler watches the workers; a server watches nothing: its machine's launcher stops it once that machine's
# workers end, and they end when the scheduler does (a server's own watch ended healthy jobs under load)
unwatch = watch(kv, WORKERS, "the mxnet scheduler lost {n} worker(s) of the job") if role == "scheduler" \
    else (lambda: None)
mx.kvstore.KVStoreServer(kv).run()  # returns once every worker has closed its kvstore
unwatch()
del kv  # ps-lite's goodbye to the other processes
