"""The MXNet engine's process group beyond the kit: a worker that meets no job ends with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from multidev.testing.processes import free_port


@pytest.mark.slow  # a fresh interpreter loading MXNet's ps-lite: 6 s of the quick suite on a Zen 3 EPYC
def test_a_worker_that_meets_no_scheduler_ends_with_one_line():
    """ps-lite waits for its scheduler for ever; the engine gives up after JOIN_SECONDS (here 2)."""
    port = free_port()  # nobody listens there
    code = textwrap.dedent("""
        import multidev_mxnet.distributed as distributed
        from multidev.engine import ProcessGroup
        distributed.JOIN_SECONDS = 2
        distributed.join(ProcessGroup(1, 2), 0)
        print("joined")
    """)
    env = dict(os.environ, DMLC_ROLE="worker", DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
               DMLC_NUM_SERVER="1", DMLC_NUM_WORKER="2")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "joined" not in done.stdout, done.stderr[-2000:]
    assert lines[-1] == (f"multidev: error: rank 1 met no MXNet job at 127.0.0.1:{port} in 2 s: start machine 0 "
                         f"(--node-rank 0) with the same --master, and every machine with the same --nnodes"), lines
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
