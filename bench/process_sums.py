"""One sum of a model's gradients between two processes on this machine, each way an engine can send it.

For bench_processes: two ranks, each in a fresh process (``bench.harness.start``),
time ``repeats`` sums of ``numel`` float32 values (after one untimed) through
the framework's own runtime and through shared memory, the core's
``multidev.engine.HostSum`` that every engine uses where a job's processes share
a machine; rank 0 returns each way's median seconds. The frameworks' sides are
plain framework code:

- torch: gloo's ``all_reduce`` of one fresh flat buffer, copied back;
- JAX: ``psum`` in 4 MB buckets inside one compiled program over a mesh of
  both processes' devices (gloo underneath);
- MXNet: ``pushpull`` through a ``dist_sync`` kvstore (2 workers, a
  scheduler, a server).
"""

from __future__ import annotations

import random
import socket
import statistics
import time
from typing import Callable, Optional

import numpy as np

from bench import harness
from bench.frameworks import load_mxnet

BUCKET = 1 << 20  # float32 values in one JAX psum: 4 MB, the engine's bucket


def free_port() -> int:
    """A free port below the machine's ephemeral range (no process takes it as its own outgoing port meanwhile)."""
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(10_000, max(low, 10_201)), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port below the ephemeral range")


def timed(ways: dict[str, Callable[[], None]], repeats: int, barrier: Callable[[], None]) -> dict[str, float]:
    """Each way's median seconds over ``repeats`` calls after one untimed, the ways in turn, the ranks in step."""
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeats + 1):
        for way, once in ways.items():
            barrier()
            start = time.perf_counter()
            once()
            times[way].append(time.perf_counter() - start)
    return {way: statistics.median(t[1:]) for way, t in times.items()}


def shared(numel: int, rank: int, barrier: Callable[[], None], all_sum: Callable[[np.ndarray], np.ndarray],
           sets: int = 1):
    """The core's shared-memory sum for these two ranks (``sets=2``: slots gathered, for a framework that adds them
    itself)."""
    from multidev.engine import HostSum, ProcessGroup

    made = HostSum.open(numel, np.float32, ProcessGroup(rank, 2), barrier, all_sum, sets=sets)
    if made is None:
        raise RuntimeError("no shared memory sum: the ranks need LOCAL_WORLD_SIZE = WORLD_SIZE = 2 and MASTER_PORT")
    return made


def torch_rank(rank: int, port: int, numel: int, repeats: int) -> Optional[dict[str, float]]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)

    def all_sum(values: np.ndarray) -> np.ndarray:
        total = torch.from_numpy(np.array(values, np.float64))
        dist.all_reduce(total)
        return total.numpy()

    buffer, memory = torch.ones(numel), shared(numel, rank, dist.barrier, all_sum)

    def gloo() -> None:  # one fresh flat buffer, copied back
        flat = torch._utils._flatten_dense_tensors([buffer])
        dist.all_reduce(flat)
        buffer.copy_(flat)

    def through_memory() -> None:
        torch.from_numpy(memory.slot()).copy_(buffer)
        buffer.copy_(torch.from_numpy(memory.sum()))

    got = timed({"gloo": gloo, "shared memory": through_memory}, repeats, dist.barrier)
    dist.destroy_process_group()
    return got if rank == 0 else None


def jax_rank(rank: int, port: int, numel: int, repeats: int) -> Optional[dict[str, float]]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_num_cpu_devices", 1)
    jax.distributed.initialize(f"127.0.0.1:{port}", 2, rank)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    cuts = list(range(BUCKET, numel, BUCKET))

    def buckets(g):
        return jnp.concatenate([jax.lax.psum(part, "data") for part in jnp.split(g, cuts, axis=1)], axis=1)

    reduce = jax.jit(jax.shard_map(buckets, mesh=mesh, in_specs=P("data"), out_specs=P()))
    grads = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), np.ones((1, numel), np.float32),
                                                   (2, numel))

    def barrier() -> None:
        multihost_utils.sync_global_devices("bench barrier")

    def all_sum(values: np.ndarray) -> np.ndarray:
        return np.asarray(multihost_utils.process_allgather(np.asarray(values, np.float32))).sum(axis=0)

    memory, device = shared(numel, rank, barrier, all_sum, sets=2), jax.local_devices()[0]
    own, add = jax.device_put(np.ones(numel, np.float32), device), jax.jit(lambda a, b: a + b)

    def through_memory() -> None:  # the own gradient into the slot, every slot read without a copy and added
        np.copyto(memory.slot(), np.asarray(own))
        add(*(jax.device_put(values, device, may_alias=True) for values in memory.gather())).block_until_ready()

    got = timed({"gloo, in a compiled program": lambda: reduce(grads).block_until_ready(),
                 "shared memory": through_memory}, repeats, barrier)
    jax.distributed.shutdown()
    return got if rank == 0 else None


def mxnet_serve() -> None:
    """MXNet's scheduler or server (``DMLC_ROLE``): it serves as it loads, and exits when the workers are done."""
    load_mxnet()


def mxnet_rank(rank: int, numel: int, repeats: int) -> Optional[dict[str, float]]:
    mx = load_mxnet()
    kv = mx.kv.create("dist_sync")
    kv.init(0, mx.nd.zeros((numel,)))
    kv.init(1, mx.nd.zeros((2,)))
    grads = mx.nd.ones((numel,))

    def all_sum(values: np.ndarray) -> np.ndarray:
        out = mx.nd.zeros((2,))
        kv.pushpull(1, mx.nd.array(values), out=out)
        return out.asnumpy()

    memory = shared(numel, rank, kv._barrier, all_sum)  # noqa: SLF001 - MXNet's own barrier
    slot = mx.nd.from_numpy(memory.slot().view(), zero_copy=True)
    total = mx.nd.from_numpy(memory.sum_view(), zero_copy=True)

    def kvstore() -> None:
        kv.pushpull(0, grads, out=grads)
        grads.wait_to_read()

    def through_memory() -> None:
        slot[:] = grads
        slot.wait_to_read()
        memory.sum()
        total.copyto(grads).wait_to_read()

    got = timed({"kvstore": kvstore, "shared memory": through_memory}, repeats, kv._barrier)  # noqa: SLF001
    return got if rank == 0 else None


def seconds(backend: str, numel: int, repeats: int = 5, timeout: float = 300) -> dict[str, float]:
    """Each way's median seconds for one sum of ``numel`` float32 between two processes of ``backend``."""
    port = free_port()
    job = {"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2", "MASTER_PORT": str(port)}
    if backend == "mxnet":
        job.update(OMP_NUM_THREADS="1", DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                   DMLC_NUM_SERVER="1", DMLC_NUM_WORKER="2")
        helpers = [harness.start(mxnet_serve, env={**job, "DMLC_ROLE": role}, label=f"mxnet {role}")
                   for role in ("scheduler", "server")]
        ranks = [harness.start(mxnet_rank, env={**job, "DMLC_ROLE": "worker"}, label=f"mxnet rank {r}", rank=r,
                               numel=numel, repeats=repeats) for r in (0, 1)]
    else:
        rank_of = {"torch": torch_rank, "jax": jax_rank}[backend]
        helpers = []
        ranks = [harness.start(rank_of, env=job, label=f"{backend} rank {r}", rank=r, port=port, numel=numel,
                               repeats=repeats) for r in (0, 1)]
    try:
        results = [child.result(timeout) for child in ranks + helpers]
    finally:
        for child in ranks + helpers:
            child.stop()
    return results[0]
