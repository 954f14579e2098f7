"""A multidev job run by Ray Train, which starts the workers and starts them all again when one dies.

Why: on a Ray cluster, Ray Train is what places the workers, watches them and,
with ``FailureConfig(max_failures=N)``, replaces the whole worker group after
a failure. Ray restarts processes, not training: each worker calls
``multidev.train(..., checkpoint=PATH, resume="auto")``, so a group started
again goes on from the last step rank 0 saved (``checkpoint_every`` updates
ago at most) instead of from the first epoch, and ends with the parameters an
uninterrupted run ends with (tests/ray/test_ray_train.py checks it).

How each engine's workers join their job here:

* torch: ``TorchTrainer`` opens ``torch.distributed`` (gloo on CPU) and sets
  ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``;
  multidev's torch engine uses that process group as it is.
* jax: Ray's ``JaxTrainer`` starts ``jax.distributed`` on TPUs and GPUs only,
  so the generic ``DataParallelTrainer`` runs the workers; rank 0 picks a port
  for JAX's coordinator, shares it (``broadcast_from_rank_zero``) and every
  worker sets the variables above, from which multidev's JAX engine joins.
* mxnet: the same, and rank 0 also starts MXNet's scheduler and parameter
  server beside itself, as ``multidev train --processes N`` does.

The checkpoint must be a path every worker can read (one machine, or a shared
file system). Run the same command again and it goes on where it stopped
(``--fresh`` starts over).

    python examples/ray_train.py --backend torch --epochs 2 --checkpoint /tmp/ray-job/ck.npz
    python examples/ray_train.py --backend jax --workers 2 --max-failures 3 --checkpoint /shared/job/ck.npz
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import ray
import ray.train
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.collective import broadcast_from_rank_zero

import multidev
from multidev.outputs import checkpoint as ckpt

if TYPE_CHECKING:
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

BACKENDS = ("torch", "jax", "mxnet")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _mxnet_helpers(env: dict[str, str], job: str) -> list[subprocess.Popen]:
    """MXNet's scheduler and one parameter server for the job, started by rank 0 (multidev_mxnet.serve).

    If either fails, this worker ends at once, so that Ray starts the group
    again: the workers' kvstores would otherwise wait for it forever. If this
    worker dies, they end by themselves once the workers' heartbeats stop
    (``multidev_mxnet.distributed.DEAD_AFTER`` seconds). ``job`` only names
    the job in their command line, for ``ps``.
    """
    helpers = [subprocess.Popen([sys.executable, "-m", "multidev_mxnet.serve", "--", "ray", job],
                                env=dict(os.environ, **env, MULTIDEV_MXNET_ROLE=role))
               for role in ("scheduler", "server")]

    def watch() -> None:
        while any(helper.poll() is None for helper in helpers):
            failed = [h for h in helpers if h.poll() not in (None, 0)]
            if failed:
                print(f"ray_train: an MXNet helper exited with code {failed[0].returncode}", file=sys.stderr,
                      flush=True)
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, name="mxnet-helpers", daemon=True).start()
    return helpers


def join_from_ray(backend: str, threads: int, job: str = "") -> list[subprocess.Popen]:
    """Set what multidev reads to join the job (``multidev.processes.group``) from Ray Train's context.

    Returns the helper processes this worker started (MXNet's, on rank 0), to
    be waited for once training is over.
    """
    context = ray.train.get_context()
    rank, size = context.get_world_rank(), context.get_world_size()
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(context.get_local_rank()),
                      OMP_NUM_THREADS=str(threads))
    if backend == "torch":  # TorchTrainer opened the process group: MASTER_ADDR and MASTER_PORT are its own
        import torch
        torch.set_num_threads(threads)
        return []
    meet = broadcast_from_rank_zero((ray.util.get_node_ip_address(), _free_port()) if rank == 0 else None)
    os.environ.update(MASTER_ADDR=meet[0], MASTER_PORT=str(meet[1]))
    if backend != "mxnet":
        return []
    env = {"DMLC_PS_ROOT_URI": meet[0], "DMLC_PS_ROOT_PORT": str(meet[1]), "DMLC_NUM_SERVER": "1",
           "DMLC_NUM_WORKER": str(size), "PS_HEARTBEAT_INTERVAL": "1"}
    helpers = _mxnet_helpers(env, job) if rank == 0 else []  # before DMLC_ROLE, which the helpers must not inherit
    os.environ.update(env, DMLC_ROLE="worker")  # read when this worker opens its kvstore, after this
    return helpers


def train_worker(config: dict[str, Any]) -> Optional[multidev.Result]:
    """Ray Train's function for each worker: join, train from the job's checkpoint if there is one, return."""
    checkpoint = config["checkpoint"]
    helpers = join_from_ray(config["backend"], config["threads"], job=checkpoint)
    if ray.train.get_context().get_world_rank() == 0:
        epoch, step = ckpt.resumes_at(checkpoint) if Path(checkpoint).is_file() else (1, 0)
        print(f"multidev under Ray: {config['backend']} x{ray.train.get_context().get_world_size()} "
              f"starts at epoch {epoch}, step {step}", flush=True)
    try:
        result = multidev.train(config["backend"], **config["settings"], checkpoint=checkpoint, resume="auto",
                                progress=False)
    finally:
        for helper in helpers:  # MXNet's scheduler and server end once every worker has closed its kvstore
            try:
                helper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                helper.kill()
    return result if ray.train.get_context().get_world_rank() == 0 else None


def trainer(backend: str, config: dict[str, Any], workers: int = 2, max_failures: int = 1,
            storage: Optional[str] = None, name: Optional[str] = None,
            worker: Callable[[dict[str, Any]], Any] = train_worker) -> DataParallelTrainer:
    """A Ray trainer that runs ``worker`` on ``workers`` CPU workers and restarts them ``max_failures`` times.

    ``TorchTrainer`` for torch (imported here: it loads torch), Ray's generic trainer for JAX and MXNet.
    """
    from ray.train.torch import TorchTrainer
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    kind = TorchTrainer if backend == "torch" else DataParallelTrainer
    # The workers start with their thread count: a library loaded before the training function runs (NumPy's
    # OpenBLAS is) keeps the count it found (measured: MXNet's parameters then differ in the last bit).
    threads = {"env_vars": {"OMP_NUM_THREADS": str(config["threads"])}}
    return kind(worker, train_loop_config=dict(config, backend=backend),
                scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
                run_config=RunConfig(name=name, storage_path=storage, worker_runtime_env=threads,
                                     failure_config=FailureConfig(max_failures=max_failures)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=BACKENDS, default="torch")
    parser.add_argument("--model", default="lenet")
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--checkpoint", default="/tmp/multidev-ray/checkpoint.npz",
                        help="the job's checkpoint: a path every worker can reach")
    parser.add_argument("--checkpoint-every", default="5", help="updates (or 30s, 10m) between mid-epoch saves")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers, one process each")
    parser.add_argument("--max-failures", type=int, default=1, help="times Ray starts the workers again")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per worker")
    parser.add_argument("--storage", help="Ray Train's storage_path (default: ~/ray_results)")
    parser.add_argument("--fresh", action="store_true", help="delete the checkpoint first instead of going on")
    args = parser.parse_args()
    checkpoint = Path(args.checkpoint).resolve()
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    if args.fresh:
        checkpoint.unlink(missing_ok=True)
    every = int(args.checkpoint_every) if args.checkpoint_every.isdigit() else args.checkpoint_every
    config = {"checkpoint": str(checkpoint), "threads": args.threads,
              "settings": dict(model=args.model, dataset=args.dataset, epochs=args.epochs,
                               batch_size=args.batch_size, checkpoint_every=every)}
    result = trainer(args.backend, config, args.workers, args.max_failures, args.storage).fit()
    if result.error is not None:
        sys.exit(f"ray_train: the job failed: {result.error}")
    trained: multidev.Result = result.return_value
    print(f"test acc {trained.test_acc:.3f} after {len(trained.epochs)} epochs; checkpoint {checkpoint}")


if __name__ == "__main__":
    main()
