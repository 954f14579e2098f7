"""Every engine through multidev: throughput, k devices against one, share of peak, first step.

Each (engine, device count) runs in its own process. Printed as a Markdown
table with the date and machine, for the README.

    python bench/bench_engines.py --backends torch,jax,mxnet --devices 1,2
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before any framework is imported: "time to first step" counts imports

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))


def worker(backend: str, k: int, batch: int, size: int, model: str, steps: int) -> dict:
    import numpy as np

    import multidev
    from timing import samples_per_sec

    spec = multidev.ModelSpec(model, (1, size, size), 10)
    engine = multidev.load_backend(backend)
    devices = multidev.resolve_devices(devices=k, gpu_count=engine.gpu_count(), max_cpu=engine.max_cpu_devices())
    reps = multidev.replicate(engine, multidev.Setup(spec, devices), spec.init(0))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, *spec.in_shape)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    sizes = multidev.shard_sizes(batch, k)
    step = lambda: reps.train_step(reps.place(multidev.cut(x, y, sizes)), lr=0.05)  # noqa: E731
    step()
    first = time.perf_counter() - _T0
    step()
    rate = max(samples_per_sec(step, batch, steps) for _ in range(2))
    return {"first_step_s": first, "samples_per_sec": rate, "compile_s": reps.compile_seconds,
            "version": multidev.registry.engine_version(engine)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch")
    parser.add_argument("--devices", default="1,2")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--worker", nargs=2, metavar=("BACKEND", "K"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.batch, args.size, args.model, args.steps)))
        return

    import multidev
    from flops import matmul_peak, training_flops
    from multidev.cli import apply_threads
    from timing import table

    apply_threads()  # as the multidev command does: the workers inherit every usable core

    spec = multidev.ModelSpec(args.model, (1, args.size, args.size), 10)
    peak, source = matmul_peak()
    rows = []
    for backend in args.backends.split(","):
        one = None
        for k in (int(v) for v in args.devices.split(",")):
            cmd = [sys.executable, __file__, "--worker", backend, str(k), "--batch", str(args.batch),
                   "--size", str(args.size), "--model", args.model, "--steps", str(args.steps)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
            if proc.returncode != 0:
                rows.append({"engine": backend, "devices": k, "samples/s": "failed", "vs 1 device": "",
                             "% of fp32 peak": "", "first step s": "", "compile s": ""})
                print(f"{backend} x{k} failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            one = got["samples_per_sec"] if k == 1 else one
            rows.append({"engine": backend, "devices": k, "samples/s": got["samples_per_sec"],
                         "vs 1 device": got["samples_per_sec"] / one if one else "",
                         "% of fp32 peak": 100 * got["samples_per_sec"] * training_flops(spec) / 1e9 / peak,
                         "first step s": got["first_step_s"], "compile s": got["compile_s"]})
    print(f"# {args.model} {args.size}x{args.size}, batch {args.batch}, fp32; {platform.machine()}, "
          f"{os.cpu_count()} cores; matmul peak {peak:.0f} GFLOP/s ({source}); "
          f"{training_flops(spec) / 1e9:.3f} GFLOP per training sample; {date.today()}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
