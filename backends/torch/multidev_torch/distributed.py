"""One process per device on torch's own runtime: the elastic launcher, ``torch.distributed`` and its sums.

``launch`` is torchrun's machinery (``torch.distributed.launcher``) with the
static rendezvous, so ``--node-rank`` fixes the ranks and machine 0 hosts the
store at ``--master``; one worker's death stops the others within about a
second. Workers meet through ``init_process_group`` on gloo (NCCL on GPUs).

``launch``, ``join``, ``leave`` and ``all_sum`` are the four every engine's
distributed.py defines, with the same signatures (the backend forwards to
them through ``multidev.engine.MultiProcess``); ``all_sum_tensors`` and
``GatherAll`` are the sums this engine's replicas and BatchNorm use.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from datetime import timedelta
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from multidev.engine import Launch, MultidevError, ProcessGroup, cause, first_line, worker_failed

from .devices import gpu_count

_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher")


@contextlib.contextmanager
def _peers() -> Iterator[None]:
    """A collective that fails because another process is gone is one line, not a traceback."""
    try:
        yield
    except RuntimeError as exc:
        first = first_line(exc, "a collective failed")
        raise MultidevError(f"rank {dist.get_rank()} lost the job ({first[:160]}): another process ended; "
                            f"the launcher says which") from None


def launch(argv: Sequence[str], launch: Launch) -> None:
    """``python -m multidev <argv>`` as ``launch.processes`` workers on this machine, through torch's launcher."""
    config = LaunchConfig(min_nodes=launch.nnodes, max_nodes=launch.nnodes, nproc_per_node=launch.processes,
                          run_id="multidev", rdzv_backend="static", rdzv_endpoint=launch.master,
                          rdzv_configs={"rank": launch.node_rank, "timeout": int(launch.timeout)}, max_restarts=0,
                          monitor_interval=0.1)
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    for name in _LOGGERS:  # the launcher's own INFO and WARNING lines would bury the workers' output
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        elastic_launch(config, sys.executable)("-m", "multidev", *argv)
    except SignalException:  # Ctrl-C or SIGTERM: the agent passed it on; each worker stopped at a step boundary
        raise KeyboardInterrupt from None
    except ChildFailedError as exc:
        failures = sorted(exc.failures.items(), key=lambda item: item[1].timestamp)
        raise worker_failed(*cause([(rank, f.exitcode) for rank, f in failures])) from None
    except Exception as exc:  # the rendezvous: a port in use, a master out of reach, a timeout
        raise MultidevError(f"the workers could not meet at {launch.master}: {first_line(exc)}; check --master (a "
                            f"free port on machine 0, reachable from every machine)") from None
    finally:
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
    dist.init_process_group("nccl" if gpus else "gloo", init_method="env://", rank=group.rank,
                            world_size=group.size, timeout=timedelta(seconds=TIMEOUT_SECONDS))
    _joined.append(True)


def leave() -> None:
    if _joined and dist.is_initialized():
        dist.destroy_process_group()
        _joined.clear()


def all_sum(values: np.ndarray) -> np.ndarray:
    """``values`` summed over every process of the job, float64 (on the GPU under NCCL)."""
    tensor = torch.as_tensor(np.asarray(values, np.float64), device=_sums_on[0] if _sums_on else None)
    with _peers():
        dist.all_reduce(tensor)
    return tensor.cpu().numpy()


def all_sum_tensors(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Many tensors summed over the processes in one collective (flattened into one buffer and back)."""
    if not tensors:  # a model without BatchNorm has no running statistics to sum
        return []
    flat = torch._utils._flatten_dense_tensors(tensors)
    with _peers():
        dist.all_reduce(flat)
    return list(torch._utils._unflatten_dense_tensors(flat, tensors))


class GatherAll(torch.autograd.Function):
    """Every process's tensor, stacked in rank order, with autograd: the gradient is summed back to its owner."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        with _peers():
            dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        with _peers():
            dist.all_reduce(grad)  # every process's loss depends on every shard's moments
        return grad[dist.get_rank()]
