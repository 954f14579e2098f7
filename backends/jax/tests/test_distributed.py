"""The JAX engine's process group beyond the kit: one compilation shared by a job's processes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from multidev.testing.processes import free_port

WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import multidev_jax.distributed as distributed
    from multidev_jax import compile_cache, compiled, shared_compile
    from multidev_jax.forms import THREADS
    from multidev.engine import ProcessGroup
    from jax._src import compiler
    rank, compiles, compile_now = int(sys.argv[1]), [0], compiler.backend_compile_and_load
    def counted(*args, **kwargs):  # a real XLA compilation, as opposed to a load from the cache or the job's store
        compiles[0] += 1
        return compile_now(*args, **kwargs)
    compiler.backend_compile_and_load = counted
    distributed.join(ProcessGroup(rank, 2), 0)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")), np.full((1, 3), rank + 1.0, np.float32))
    step = compiled.Compiler(THREADS.pinned()).get("sum", jax.jit(lambda x: jnp.sum(jnp.sin(x) * 2.0)), x)
    total = float(step(x))
    print(json.dumps({"rank": rank, "hits": compile_cache.hits(), "compiles": compiles[0], "total": total,
                      "note": shared_compile.note()}))
    distributed.leave()
""")


EXPECTED = 2.0 * 3 * (math.sin(1.0) + math.sin(2.0))  # sum(sin(x) * 2) over rank 0's ones and rank 1's twos


def _job(*caches: str) -> list[dict]:
    """Two processes of one job, each with its compilation cache (one folder for both, or "off" in one)."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), MULTIDEV_JAX_CPU_DEVICES="1")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**env, "MULTIDEV_COMPILE_CACHE": cache})
             for r, cache in enumerate(caches * 2 if len(caches) == 1 else caches)]
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


@pytest.mark.slow  # two jobs of two JAX processes (about 20 s)
def test_a_jobs_processes_share_one_compilation_and_its_cache_entry(tmp_path):
    """Before, rank 1 computed another cache key: it compiled on every run and never read rank 0's entry."""
    cache = str(tmp_path / "cache")
    first, second = _job(cache), _job(cache)
    for run in (first, second):
        assert [r["rank"] for r in run] == [0, 1]
        assert all(abs(r["total"] - EXPECTED) < 1e-5 for r in run), run
        assert all(r["note"].startswith("shared") for r in run), run
    # Rank 0 compiled; rank 1 loaded its executable from the job's store, or from the cache entry rank 0 had
    # already written if it came later: either way it compiled nothing.
    assert first[0]["hits"] == 0 and first[0]["compiles"] >= 1 and first[1]["compiles"] == 0, first
    assert second[0]["hits"] == second[1]["hits"] >= 1, second  # both read the entries rank 0 wrote
    assert [r["compiles"] for r in second] == [0, 0], second


@pytest.mark.slow  # a job of two JAX processes (about 8 s)
def test_a_process_without_the_cache_makes_every_process_compile_its_own(tmp_path):
    """Sharing is all or none: one process with the cache off must not leave the other waiting for an executable."""
    run = _job(str(tmp_path / "cache"), "off")
    assert all(abs(r["total"] - EXPECTED) < 1e-5 for r in run), run
    assert all(r["note"] == "not shared (the compilation cache is off in a process): every process compiles its own"
               for r in run), run
