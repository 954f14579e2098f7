"""One job as 2 processes x 1 device against 1 process x 2 devices, on the same cores, per engine.

For every engine that claims ``multi_process``: the epoch time of both forms
(alternating runs, medians), their ratio, the start-up seconds of each (the
command's wall time less its epochs), and the seconds one all-reduce of the
model's gradients takes between two processes on the framework's runtime.

    python bench/bench_processes.py --backends torch --epochs 2 --rounds 3
    python bench/bench_processes.py --backends torch,jax,mxnet --images 28 --samples 512

The all-reduce of the gradients does not depend on the images: digits' 8x8
make a step short, the book's 28x28 (``--images 28``, random images of that
size written to a .npz file) long, against the same all-reduce.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from multidev.testing.processes import free_port  # below the ephemeral range: no worker takes it from itself

sys.path.insert(0, str(Path(__file__).parent))


def images_file(folder: str, size: int, samples: int) -> str:
    """A .npz data set of ``samples`` random ``size`` x ``size`` gray images in 10 classes (a quarter as many to
    test)."""
    import numpy as np

    rng = np.random.default_rng(0)
    path = str(Path(folder) / f"images{size}.npz")
    np.savez(path, **{f"x_{part}": rng.normal(size=(n, 1, size, size)).astype(np.float32) for part, n in
                      (("train", samples), ("test", samples // 4))},
             **{f"y_{part}": rng.integers(0, 10, n) for part, n in (("train", samples), ("test", samples // 4))})
    return path


def run(backend: str, form: list[str], epochs: int, model: str, data: str) -> tuple[float, float]:
    """(seconds per epoch, start-up seconds) of one ``multidev train`` run."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "multidev", "train", "--backend", backend, "--model", model,
                        "--dataset", data, "--epochs", str(epochs), "--no-progress", "--json", str(out), *form],
                       check=True, capture_output=True, text=True)
        wall = time.perf_counter() - start
        result = json.loads(out.read_text())
    trained = sum(e["seconds"] for e in result["epochs"])
    return result["sec_per_epoch"], wall - trained


def _torch_allreduce_worker(rank: int, port: int, numel: int, repeats: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    buffer = torch.ones(numel)
    os.environ.update(LOCAL_WORLD_SIZE="2", WORLD_SIZE="2", MASTER_PORT=str(port))
    from multidev_torch.distributed import host_sum
    shared = host_sum(numel, torch.float32)  # the engine's way on one machine
    times = {"gloo": [], "shared memory": []}
    for _ in range(repeats + 1):
        for way in times:
            dist.barrier()
            start = time.perf_counter()
            if way == "gloo":  # as the engine's gloo path does it: one fresh flat buffer, copied back
                flat = torch._utils._flatten_dense_tensors([buffer])
                dist.all_reduce(flat)
                buffer.copy_(flat)
            else:
                torch.from_numpy(shared.slot()).copy_(buffer)
                buffer.copy_(torch.from_numpy(shared.sum()))
            times[way].append(time.perf_counter() - start)
    if rank == 0:
        Path(out).write_text(json.dumps({way: statistics.median(t[1:]) for way, t in times.items()}))
    dist.destroy_process_group()


def torch_allreduce_seconds(numel: int, repeats: int = 5) -> dict[str, float]:
    import torch.multiprocessing as mp

    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "seconds")
        mp.spawn(_torch_allreduce_worker, args=(port, numel, repeats, out), nprocs=2)
        return json.loads(Path(out).read_text())


_MXNET_WORKER = """
import json, os, statistics, sys, time
import numpy as np
from multidev import ProcessGroup
from multidev_mxnet import distributed
from multidev_mxnet.runtime import mxnet
mx = mxnet()
numel, repeats, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
distributed.join(ProcessGroup(int(os.environ["RANK"]), 2), 0)
kv = distributed.kvstore()
kv.init(0, mx.nd.zeros((numel,)))
grads = mx.nd.ones((numel,))
shared = distributed.host_sum(numel, np.dtype(np.float32), ProcessGroup(int(os.environ["RANK"]), 2))
slot = mx.nd.from_numpy(shared.slot().view(), zero_copy=True)
total = mx.nd.from_numpy(shared.sum_view(), zero_copy=True)
times = {"kvstore": [], "shared memory": []}
for _ in range(repeats + 1):
    for way in times:
        kv._barrier()
        start = time.perf_counter()
        if way == "kvstore":
            kv.pushpull(0, grads, out=grads)
        else:
            slot[:] = grads
            slot.wait_to_read()
            shared.sum()
            total.copyto(grads)
        grads.wait_to_read()
        times[way].append(time.perf_counter() - start)
if os.environ["RANK"] == "0":
    open(out, "w").write(json.dumps({way: statistics.median(t[1:]) for way, t in times.items()}))
distributed.leave()
"""


def mxnet_allreduce_seconds(numel: int, repeats: int = 5) -> dict[str, float]:
    """One pushpull of the gradients through MXNet's dist_sync kvstore: 2 workers, a scheduler, a server."""
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
               DMLC_NUM_SERVER="1", DMLC_NUM_WORKER="2", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_PORT=str(port))
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "seconds")
        serve = [subprocess.Popen([sys.executable, "-m", "multidev_mxnet.serve"],
                                  env=dict(env, MULTIDEV_MXNET_ROLE=role))
                 for role in ("scheduler", "server")]
        workers = [subprocess.Popen([sys.executable, "-c", _MXNET_WORKER, str(numel), str(repeats), out],
                                    env=dict(env, DMLC_ROLE="worker", RANK=str(rank))) for rank in (0, 1)]
        for process in workers + serve:
            process.wait(timeout=300)
        return json.loads(Path(out).read_text())


_JAX_WORKER = """
import json, os, statistics, sys, time
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from multidev import ProcessGroup
from multidev_jax.allreduce import all_sum
from multidev_jax.distributed import host_sum
rank, port, numel, repeats, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
jax.distributed.initialize(f"127.0.0.1:{port}", 2, rank)
os.environ.update(LOCAL_WORLD_SIZE="2", WORLD_SIZE="2", MASTER_PORT=port)
mesh = Mesh(np.array(jax.devices()), ("data",))
sharded = NamedSharding(mesh, P("data"))
# the engine's bucketed sum, alone in a program: the gradients of two devices, one per process
reduce = jax.jit(jax.shard_map(lambda g: all_sum(g, "data", bucketed=True), mesh=mesh, in_specs=P("data"),
                               out_specs=P()))
grads = jax.make_array_from_process_local_data(sharded, np.ones((1, numel), np.float32), (2, numel))
# the engine's shared memory: the own gradient copied into the slot, every slot read without a copy and added
shared, device = host_sum(numel, np.dtype(np.float32), ProcessGroup(rank, 2)), jax.local_devices()[0]
own, add = jax.device_put(np.ones(numel, np.float32), device), jax.jit(lambda a, b: a + b)

def through_shared_memory():
    np.copyto(shared.slot(), np.asarray(own))
    return add(*(jax.device_put(values, device, may_alias=True) for values in shared.gather()))

ways = {"gloo, in the compiled step": lambda: reduce(grads), "shared memory": through_shared_memory}
times = {way: [] for way in ways}
for _ in range(repeats + 1):
    for way, once in ways.items():
        start = time.perf_counter()
        once().block_until_ready()
        times[way].append(time.perf_counter() - start)
if rank == 0:
    open(out, "w").write(json.dumps({way: statistics.median(t[1:]) for way, t in times.items()}))
jax.distributed.shutdown()
"""


def jax_allreduce_seconds(numel: int, repeats: int = 5) -> dict[str, float]:
    """One sum of the gradients between two JAX processes each way the engine's step makes it (parallel.py)."""
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "seconds")
        workers = [subprocess.Popen([sys.executable, "-c", _JAX_WORKER, str(rank), str(port), str(numel),
                                     str(repeats), out], env=env) for rank in (0, 1)]
        for process in workers:
            process.wait(timeout=300)
        return json.loads(Path(out).read_text())


ALLREDUCE = {"torch": torch_allreduce_seconds, "jax": jax_allreduce_seconds, "mxnet": mxnet_allreduce_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=0, help="random square images of this size instead of digits")
    parser.add_argument("--samples", type=int, default=512, help="training images with --images")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        data = images_file(folder, args.images, args.samples) if args.images else "digits"
        compare(args, data)


def compare(args: argparse.Namespace, data: str) -> None:

    import multidev

    cores = len(os.sched_getaffinity(0))
    side = args.images or 8
    spec = multidev.ModelSpec(args.model, (1, side, side), 10)
    numel = sum(int(__import__("numpy").prod(p.shape)) for p in spec.params() if p.trainable)
    forms = {"2 processes x 1 device": ["--processes", "2", "--devices", "1"],
             "1 process x 2 devices": ["--devices", "2"]}
    what = f"{args.samples} random {side}x{side} images" if args.images else "digits"
    print(f"# {args.model} on {what}, {args.epochs} epochs a run, {args.rounds} alternating rounds, {cores} cores, "
          f"{platform.machine()}, {date.today()}")
    print("| engine | form | sec/epoch | start-up s | speed of 2 processes / 1 process | all-reduce s between 2 "
          "processes, each way |")
    print("|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        engine = multidev.load_backend(backend)
        if "multi_process" not in engine.capabilities:
            print(f"| {backend} | does not claim multi_process | | | | |")
            continue
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in forms}
        for _ in range(args.rounds):
            for name, form in forms.items():
                times[name].append(run(backend, form, args.epochs, args.model, data))
        median = {name: (statistics.median(t[0] for t in runs), statistics.median(t[1] for t in runs))
                  for name, runs in times.items()}
        ratio = median["1 process x 2 devices"][0] / median["2 processes x 1 device"][0]
        reduce = ", ".join(f"{way} {seconds:.3f}" for way, seconds in ALLREDUCE[backend](numel).items())
        for name, (epoch, startup) in median.items():
            extra = f"{ratio:.2f} | {reduce}" if name.startswith("2") else " | "
            print(f"| {backend} | {name} | {epoch:.2f} | {startup:.1f} | {extra} |")


if __name__ == "__main__":
    main()
