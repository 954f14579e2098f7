"""One process per device on torch's own runtime: the elastic launcher, ``torch.distributed`` and its sums.

``launch`` is torchrun's machinery (torch's elastic agent) with the static
rendezvous, so ``--node-rank`` fixes the ranks and machine 0 hosts the store
at ``--master``; one worker's death stops the others within about a second,
and the agent restarts them all (``--max-restarts``). Workers meet through
``init_process_group`` on gloo (NCCL on GPUs).

``launch``, ``join``, ``leave`` and ``all_sum`` are the four every engine's
distributed.py defines, with the same signatures (the backend forwards to
them through ``multidev.engine.MultiProcess``); ``all_sum_tensors`` and
``GatherAll`` are the sums this engine's replicas and BatchNorm use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from datetime import timedelta
from typing import Iterator, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.elastic.agent.server.api import WorkerSpec
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler as rendezvous_handler

from multidev.engine import (GRACE, HostSum, JobStopped, Launch, MultidevError, PeerLost, ProcessGroup, Restart,
                             cause, first_line, parse_master, restart, restart_count, worker_failed)

from .devices import gpu_count

_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher")


@contextlib.contextmanager
def peers(around: bool = False) -> Iterator[None]:
    """A collective that fails because another process is gone is one line, not a traceback.

    ``around``: the block does more than collectives (an FSDP2 pass), so only the transport's own errors are a
    peer gone; any other error is the block's own and goes on as it is."""
    try:
        yield
    except RuntimeError as exc:
        if around and not (isinstance(exc, dist.DistError) or "gloo" in str(exc)):
            raise
        first = first_line(exc, "a collective failed")
        raise PeerLost(f"rank {dist.get_rank()} lost the job ({first[:160]}): another process ended; "
                       f"the launcher says which") from None


def _first_failed(failures: dict) -> tuple[int, int]:
    """(rank, exit code) to name of the agent's failures (rank -> ProcessFailure), seen in time order."""
    ordered = sorted(failures.items(), key=lambda item: item[1].timestamp)
    return cause([(rank, failure.exitcode) for rank, failure in ordered])


class _Agent(LocalElasticAgent):
    """torch's own agent, that says each restart in one line and keeps its record."""

    def __init__(self, spec: WorkerSpec, launch: Launch, logs: str) -> None:
        # torch's default is a fresh /tmp/torchelastic_* per launch, left behind (empty) after every job
        super().__init__(spec, DefaultLogsSpecs(log_dir=logs), exit_barrier_timeout=launch.timeout,
                         shutdown_timeout=int(GRACE))
        self.launch, self.restarts, self.failures = launch, [], {}

    def _monitor_workers(self, worker_group):
        result = super()._monitor_workers(worker_group)
        if result.is_failed():
            self.failures = result.failures
        return result

    def _restart_workers(self, worker_group) -> None:
        if self.failures:  # (torch restarts for new machines too: never with the static rendezvous)
            rank, code = _first_failed(self.failures)
            self.restarts.append(restart(len(self.restarts) + 1, self.launch.max_restarts, f"worker rank {rank}",
                                         code, self.launch.checkpoint))
            self.failures = {}
        super()._restart_workers(worker_group)


def _agent(argv: Sequence[str], launch: Launch, logs: str) -> _Agent:
    """torchrun's agent for this machine's workers, on the static rendezvous at ``--master`` (machine 0 hosts it)."""
    host, port = parse_master(launch.master)
    rendezvous = RendezvousParameters(backend="static", endpoint=launch.master, run_id="multidev",
                                      min_nodes=launch.nnodes, max_nodes=launch.nnodes, rank=launch.node_rank,
                                      timeout=int(launch.timeout))
    spec = WorkerSpec(role="multidev", local_world_size=launch.processes, entrypoint=sys.executable,
                      args=("-m", "multidev", *argv), rdzv_handler=rendezvous_handler(rendezvous),
                      max_restarts=launch.max_restarts, monitor_interval=0.1, master_addr=host, master_port=port)
    return _Agent(spec, launch, logs)


def launch(argv: Sequence[str], launch: Launch) -> list[Restart]:
    """``python -m multidev <argv>`` as ``launch.processes`` workers on this machine, by torch's elastic agent.

    The agent restarts the workers up to ``launch.max_restarts`` times. A
    machine whose workers failed for good waits at the agent's exit barrier
    too, so a machine that finished is let go at once, not after 300 s.
    """
    # the launcher's own INFO and WARNING lines would bury the workers' output; torch's modules set their loggers'
    # levels themselves (a parent's does not reach them), so each is quieted
    names = {*_LOGGERS, *(n for n in logging.Logger.manager.loggerDict if n.startswith(_LOGGERS))}
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logs = tempfile.mkdtemp(prefix="torchelastic_")
    try:
        agent = _agent(argv, launch, logs)
        result = agent.run()
        if result.is_failed():
            agent._exit_barrier()  # noqa: SLF001 - the finished machines wait there for this one
            raise worker_failed(*_first_failed(result.failures))
        return agent.restarts
    except SignalException as exc:  # Ctrl-C or SIGTERM: the agent passed it on; each worker stopped at a step boundary
        raise JobStopped(int(exc.sigval)) from None
    except MultidevError:
        raise
    except Exception as exc:  # the rendezvous: a port in use, a master out of reach, a timeout
        raise MultidevError(f"the workers could not meet at {launch.master}: {first_line(exc)}; check --master (a "
                            f"free port on machine 0, reachable from every machine)") from None
    finally:
        shutil.rmtree(logs, ignore_errors=True)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


#: seconds a collective waits for every process before it fails
TIMEOUT_SECONDS = 300.0

_joined: list[bool] = []  # whether this module opened the process group (and so closes it)
_sums_on: list[torch.device] = []  # where all_sum's tensors go: a GPU when the job runs on GPUs (NCCL)


def join(group: ProcessGroup, local_rank: int) -> None:
    """Connect to the job (torchrun's MASTER_ADDR / MASTER_PORT); every later sum goes through it.

    On GPUs, worker ``local_rank`` takes GPU ``local_rank`` (modulo the GPUs
    there are) and the job runs on NCCL. A group the caller opened already
    (Ray Train's TorchTrainer does) is used as it is.
    """
    gpus = gpu_count()
    if gpus:
        torch.cuda.set_device(local_rank % gpus)
    _sums_on[:] = [torch.device("cuda")] if gpus else []
    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (group.rank, group.size):
            raise MultidevError(f"torch.distributed is open as rank {dist.get_rank()} of {dist.get_world_size()}, "
                                f"the environment says {group.rank} of {group.size}: start the job once")
        return
    timeout = timedelta(seconds=TIMEOUT_SECONDS)
    dist.init_process_group("nccl" if gpus else "gloo", store=_attempt_store(group, timeout), rank=group.rank,
                            world_size=group.size, timeout=timeout)
    _joined.append(True)


def _attempt_store(group: ProcessGroup, timeout: timedelta) -> Optional[dist.Store]:
    """Under torch's agent, its store with a key prefix of this start's own; else None (``env://``).

    The static rendezvous keeps one store for every restart, so without the
    prefix a restarted rank could read the address a dead peer left there and
    fail to connect (seen: "Gloo connectFullMesh failed ... Connection refused").
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), group.size, is_master=False,
                          timeout=timeout)
    return dist.PrefixStore(f"multidev/start{restart_count()}", store)


def leave() -> None:
    if _joined and dist.is_initialized():
        dist.destroy_process_group()
        _joined.clear()


def all_sum(values: np.ndarray) -> np.ndarray:
    """``values`` summed over every process of the job, float64 (on the GPU under NCCL)."""
    tensor = torch.as_tensor(np.asarray(values, np.float64), device=_sums_on[0] if _sums_on else None)
    with peers():
        dist.all_reduce(tensor)
    return tensor.cpu().numpy()


def barrier() -> None:
    with peers():
        dist.barrier()


def host_sum(numel: int, dtype: torch.dtype) -> Optional[HostSum]:
    """A sum of ``numel`` values through this machine's shared memory (a collective), or None where it cannot be.

    CPU jobs whose processes are all on this machine only (multidev.processes.hostsum); NCCL sums GPUs' itself.
    """
    if _sums_on:
        return None
    return HostSum.open(numel, torch.empty((), dtype=dtype).numpy().dtype, ProcessGroup(dist.get_rank(),
                        dist.get_world_size()), barrier, all_sum)


def all_sum_tensors(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Many tensors summed over the processes in one collective (flattened into one buffer and back)."""
    if not tensors:  # a model without BatchNorm has no running statistics to sum
        return []
    flat = torch._utils._flatten_dense_tensors(tensors)
    with peers():
        dist.all_reduce(flat)
    return list(torch._utils._unflatten_dense_tensors(flat, tensors))


class GatherAll(torch.autograd.Function):
    """Every process's tensor, stacked in rank order, with autograd: the gradient is summed back to its owner."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        with peers():
            dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        with peers():
            dist.all_reduce(grad)  # every process's loss depends on every shard's moments
        return grad[dist.get_rank()]
