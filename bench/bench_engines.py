"""Every engine through multidev: throughput, k devices against one, share of peak, first step.

Each (engine, device count) runs in its own process, ``--rounds`` times,
the device counts alternating, so that load on a shared machine falls on
every row alike; each run times ``--repeats`` windows of ``--steps`` steps
and keeps their median, and the table keeps the median run. A worker sets
its threads as the ``multidev`` command does and reports the engine's
settings, so a row shows what it ran under. Printed as a Markdown table with
the date and machine, for the README.

    python bench/bench_engines.py --backends torch,jax,mxnet --devices 1,2
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before any framework is imported: "time to first step" counts imports

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))


def worker(backend: str, k: int, batch: int, size: int, model: str, steps: int, repeats: int) -> dict:
    import statistics

    import numpy as np
    from timing import samples_per_sec

    import multidev
    from multidev.processes.threads import apply_threads

    apply_threads()  # as `multidev train` does, before any framework loads (a parent's setting stands)

    spec = multidev.ModelSpec(model, (1, size, size), 10)
    engine = multidev.load_backend(backend)
    from multidev.engine import plan_cpu_devices
    plan_cpu_devices(engine, k)  # as a run tells it, before its first other call
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
    rate = statistics.median(samples_per_sec(step, batch, steps) for _ in range(repeats))
    return {"first_step_s": first, "samples_per_sec": rate, "compile_s": reps.compile_seconds,
            "compile_cached": getattr(reps, "compile_cached", 0),
            "version": multidev.engines.registry.engine_version(engine),
            "settings": engine.settings(), "threads": os.environ.get("OMP_NUM_THREADS", "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch")
    parser.add_argument("--devices", default="1,2")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--steps", type=int, default=4, help="steps per timed window")
    parser.add_argument("--repeats", type=int, default=3, help="timed windows per run (their median counts)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per row, device counts alternating (median)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--worker", nargs=2, metavar=("BACKEND", "K"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.batch, args.size, args.model, args.steps,
                                args.repeats)))
        return

    from flops import peak, training_flops
    from timing import table

    import multidev
    from multidev.processes.threads import apply_threads

    apply_threads()  # as the multidev command does: the workers inherit every usable core

    spec = multidev.ModelSpec(args.model, (1, args.size, args.size), 10)
    counts = [int(v) for v in args.devices.split(",")]
    runs: dict[tuple[str, int], list[dict]] = {}
    # a compilation cache of this benchmark's own: each row's first run compiles cold, later rounds load it
    cache = tempfile.mkdtemp(prefix="bench-compile-cache-")
    env = {**os.environ, "MULTIDEV_COMPILE_CACHE": cache}
    for backend in args.backends.split(","):
        for _ in range(args.rounds):
            for k in counts:
                cmd = [sys.executable, __file__, "--worker", backend, str(k), "--batch", str(args.batch),
                       "--size", str(args.size), "--model", args.model, "--steps", str(args.steps),
                       "--repeats", str(args.repeats)]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                warnings = [ln for ln in proc.stderr.splitlines() if "warning" in ln.lower()]
                for line in warnings[:3]:  # what the worker ran under, even when it succeeded
                    print(f"{backend} x{k}: {line}", file=sys.stderr)
                if proc.returncode != 0:
                    print(f"{backend} x{k} failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                runs.setdefault((backend, k), []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    shutil.rmtree(cache, ignore_errors=True)
    top, source = peak(len(os.sched_getaffinity(0)))  # after the workers: none holds a framework meanwhile
    rows = []
    for backend in args.backends.split(","):
        one = None
        for k in counts:
            done = sorted(runs.get((backend, k), []), key=lambda r: r["samples_per_sec"])
            if not done:
                rows.append({"engine": backend, "devices": k, "samples/s": "failed", "vs 1 device": "",
                             "% of fp32 peak": "", "first step s": "", "cached first step s": "", "compile s": "",
                             "threads": ""})
                continue
            got = done[len(done) // 2]
            cold = [r["first_step_s"] for r in done if not r["compile_cached"]]
            compiled = [r["compile_s"] for r in done if not r["compile_cached"]]  # a cached run's is mostly tracing
            warm = [r["first_step_s"] for r in done if r["compile_cached"]]
            one = got["samples_per_sec"] if k == 1 else one
            rows.append({"engine": backend, "devices": k, "samples/s": got["samples_per_sec"],
                         "vs 1 device": got["samples_per_sec"] / one if one else "",
                         "% of fp32 peak": 100 * got["samples_per_sec"] * training_flops(spec) / 1e9 / top,
                         "first step s": min(cold) if cold else got["first_step_s"],
                         "cached first step s": min(warm) if warm else "",
                         "compile s": min(compiled) if compiled else got["compile_s"],
                         "threads": got["threads"]})
    print(f"# {args.model} {args.size}x{args.size}, batch {args.batch}, fp32; {platform.machine()}, "
          f"{os.cpu_count()} cores; peak {top:.0f} GFLOP/s, the larger of {source}; "
          f"{training_flops(spec) / 1e9:.3f} GFLOP per training sample; median of {args.rounds} run(s) of "
          f"{args.repeats} x {args.steps} steps; {date.today()}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
