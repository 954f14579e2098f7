"""``python -m multidev_mxnet.serve``: MXNet's scheduler or a server of a job, as ``DMLC_ROLE`` says.

MXNet would serve as soon as it loads; it is loaded as a worker instead and
serves here, so that the scheduler can watch the job: ps-lite's heartbeats
(``PS_HEARTBEAT_INTERVAL``, set by the launcher) tell it when a process of
another machine is gone, and it then ends, which ends the job everywhere
(see :func:`.distributed.watch`). The arguments after ``--`` are the job's,
there only so that ``ps`` shows which job a scheduler or server belongs to.
"""

import os
import sys

from .distributed import SCHEDULER, SERVERS, WORKERS, watch
from .runtime import mxnet

role = os.environ.get("DMLC_ROLE")
if role not in ("scheduler", "server"):
    sys.exit("multidev_mxnet.serve runs MXNet's scheduler or a server: set DMLC_ROLE (the launcher does)")
os.environ["DMLC_ROLE"] = "worker"  # MXNet reads it when it loads (and would serve there, unwatched)
try:
    mx = mxnet()
finally:
    os.environ["DMLC_ROLE"] = role
kv = mx.kv.create("dist")
if role == "scheduler":
    unwatch = watch(kv, WORKERS + SERVERS, "the mxnet scheduler lost {n} process(es) of the job")
else:
    unwatch = watch(kv, SCHEDULER, "an mxnet server lost the scheduler")
mx.kvstore.KVStoreServer(kv).run()  # returns once every worker has closed its kvstore
unwatch()
del kv  # ps-lite's goodbye to the other processes
