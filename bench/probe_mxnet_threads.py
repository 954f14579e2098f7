"""Whether an MXNet run uses both cores: samples/s and CPU time over wall time of 12 ResNet-18 steps (issue 14).

A CPU/wall ratio near the core count means every core works; near 1, one thread does. Run it directly, through
a parent process as bench_engines.py starts its workers, and without OMP_NUM_THREADS, on a quiet machine:

    OMP_NUM_THREADS=2 python bench/probe_mxnet_threads.py 1
    env -u OMP_NUM_THREADS python bench/probe_mxnet_threads.py 1
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import multidev


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    from multidev_mxnet.runtime import threads_note

    spec = multidev.ModelSpec("resnet18", (1, 28, 28), 10)
    engine = multidev.load_backend("mxnet")
    devices = multidev.resolve_devices(devices=k, gpu_count=engine.gpu_count())
    reps = multidev.replicate(engine, multidev.Setup(spec, devices), spec.init(0))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 64)

    def step() -> None:
        reps.train_step(reps.place(multidev.cut(x, y, multidev.shard_sizes(64, k))), lr=0.05)

    mx = sys.modules["mxnet"]
    for _ in range(3):
        step()
    mx.nd.waitall()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(12):
        step()
    mx.nd.waitall()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"k={k}: {768 / wall:.1f} samples/s, cpu/wall {cpu / wall:.2f}, OMP={os.environ.get('OMP_NUM_THREADS')!r}, "
          f"{threads_note()}, affinity {sorted(os.sched_getaffinity(0))}, tasks {len(os.listdir('/proc/self/task'))}")


if __name__ == "__main__":
    main()
