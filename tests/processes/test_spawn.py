"""Starting and stopping the workers of a job: which failure is named when several end."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from multidev.errors import MultidevError
from multidev.processes import spawn as spawn_module
from multidev.processes.faults import JobStopped, Restart
from multidev.processes.launch import Launch
from multidev.processes.spawn import cause
from multidev.testing.processes import free_port


def test_the_worker_killed_is_named_not_the_one_that_lost_it():
    """Rank 1 is killed and rank 0, its peer gone, exits with an error within the same poll."""
    assert cause([(0, 2), (1, -signal.SIGKILL)]) == (1, -signal.SIGKILL)
    assert cause([(0, -signal.SIGTERM), (1, 3)]) == (0, -signal.SIGTERM)  # the launcher's SIGTERM: order decides
    assert cause([(2, 1), (0, 2)]) == (2, 1)


def test_the_worker_that_failed_alone_is_named_not_the_one_jax_aborted():
    """JAX: rank 0 fails alone (a traceback, exit 1) and its coordinator's end aborts rank 1 within the same poll."""
    assert cause([(1, -signal.SIGABRT), (0, 1)]) == (0, 1)
    assert cause([(1, -signal.SIGABRT), (0, -signal.SIGKILL)]) == (0, -signal.SIGKILL)
    assert cause([(0, 2), (1, -signal.SIGABRT)]) == (1, -signal.SIGABRT)  # a real abort, its peer lost


#: a stand-in worker: notes its rank, start and port, and (rank 1, first start) dies as a killed worker does
WORKER = """
import os, signal, sys, time
rank, start = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
open(os.path.join(sys.argv[1], f"rank{rank}-start{start}-port{os.environ['MASTER_PORT']}"), "w").close()
if rank == 1 and start == 0:
    os.kill(os.getpid(), signal.SIGKILL)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def stand_ins(monkeypatch, tmp_path):
    """spawn's workers replaced by WORKER (they live ``seconds``): the launcher's loop alone is under test."""
    seconds = [0.0]

    def start(argv, env):
        return subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(seconds[0])],
                                env=dict(os.environ, **env))

    monkeypatch.setattr(spawn_module, "_start", start)
    return seconds


def test_a_killed_worker_restarts_the_job_at_the_next_port(stand_ins, tmp_path, capsys):
    port = free_port()
    restarts = spawn_module.spawn(["train"], Launch(processes=2, master=f"127.0.0.1:{port}", max_restarts=2))
    assert restarts == [Restart(1, "worker rank 1", "was killed by SIGKILL", 1, 0)]
    said = "multidev: worker rank 1 was killed by SIGKILL: restart 1 of 2, from epoch 1, step 0\n"
    assert capsys.readouterr().err == said
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"rank0-start0-port{port}", f"rank0-start1-port{port + 1}", f"rank1-start0-port{port}",
        f"rank1-start1-port{port + 1}"]


def test_without_restarts_a_killed_worker_ends_the_job(stand_ins):
    with pytest.raises(MultidevError, match="^worker rank 1 was killed by SIGKILL: the job was stopped"):
        spawn_module.spawn(["train"], Launch(processes=2, master=f"127.0.0.1:{free_port()}"))


def test_sigterm_to_the_launcher_reaches_every_worker_and_ends_without_a_restart(stand_ins, tmp_path):
    stand_ins[0] = 60.0  # the workers would live a minute; SIGTERM ends them at once
    launch = Launch(processes=2, master=f"127.0.0.1:{free_port()}", max_restarts=1)
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    began = time.monotonic()
    with pytest.raises(JobStopped) as stopped:
        spawn_module.spawn(["train"], launch)
    timer.join()
    assert stopped.value.signum == signal.SIGTERM and time.monotonic() - began < 30
    assert signal.getsignal(signal.SIGTERM) is before  # the launcher's handler is gone with it


def test_a_master_port_in_the_ephemeral_range_is_named_where_machines_wait(monkeypatch):
    """Where processes wait to meet, a port the kernel may give a connection is a risk; one process meets nobody."""
    monkeypatch.setattr("multidev.processes.launch.ephemeral_ports", lambda: (32768, 60999))
    assert Launch(processes=1, master="127.0.0.1:40000").port_risk() is None
    assert Launch(nnodes=2, master="127.0.0.1:29500", max_restarts=3).port_risk() is None
    risk = Launch(nnodes=2, master="127.0.0.1:32767", max_restarts=1).port_risk()
    assert risk == ("--master port 32767 (to 32768 with restarts) lies in this machine's ephemeral range 32768-60999: "
                    "a process waiting for machine 0 can take it by connecting to itself; choose a port below 32768, "
                    "such as 29500")
    assert Launch(processes=2, master="127.0.0.1:45000", max_restarts=1).port_risk() is not None
