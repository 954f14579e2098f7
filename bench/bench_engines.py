"""Every engine through multidev: throughput, k devices against one, share of peak, first step.

Each (engine, device count) runs in its own process (``bench.harness.fresh``),
``--rounds`` times, the device counts alternating, so that load on a shared
machine falls on every row alike; each run times ``--repeats`` windows of
``--steps`` steps and keeps their median, and the table keeps the median run.
Threads are set as the ``multidev`` command sets them, and each row says the
engine's version and threads. The first step's seconds count the process's
imports, compilation and any measuring, the replicas built as a run builds them
(its batch's rows given); the first round starts cold (a compilation cache and
cache folder of each row's own: no executable, no kept choice), later rounds
load what it kept ("cached first step s": JAX's programs, or a layout torch
measured under ``MULTIDEV_TORCH_LAYOUT=measure``; an engine that keeps nothing
has none). Beside each row, in processes of its own in the same rounds, the
framework's own hand-written loop of the same network, batch and devices (the
book's, as ``bench_torch``, ``bench_mxnet`` and ``bench_jax`` time it) takes
its first step from a cold start too, JAX's with its compilation cache kept
between rounds (``JAX_COMPILATION_CACHE_DIR``): what the framework itself
needs on this CPU, so that the engine's first step reads as a ratio to it
("first step / its loop's", the cold ones). The peak
is the larger of the best matrix product numpy, torch and JAX measure here and
the vector units' own (fp32 lanes x 2 FMA units x 2 x cores x the clock
/proc/cpuinfo gives), both stated in the notes.

    python -m bench.bench_engines --backends torch,jax,mxnet --devices 1,2
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from functools import partial
from typing import Any, Optional

import numpy as np

from bench import harness
from bench.harness.flops import peak, training_flops
from bench.jax_peers import synthetic_batch

SMOKE = {"backends": "torch,jax,mxnet", "devices": "1", "model": "mlp", "size": 8, "batch": 8, "steps": 1,
         "repeats": 1, "rounds": 1, "peak_size": 256}


def worker(backend: str, k: int, batch: int, size: int, model: str, steps: int, repeats: int) -> dict[str, Any]:
    """One engine on ``k`` devices in this (fresh) process: its first step's seconds since the process started,
    then the median samples/s of ``repeats`` windows."""
    harness.as_the_command()  # before any framework loads (a parent's setting stands)
    import os

    warm = kept()

    import multidev
    from multidev.engines.registry import engine_version

    spec = multidev.ModelSpec(model, (1, size, size), 10)
    engine = multidev.load_backend(backend)
    devices = harness.run_devices(engine, k)
    reps = multidev.replicate(engine, multidev.Setup(spec, devices, rows=batch), spec.init(0))  # rows: as a run
    x, y = synthetic_batch({"batch": batch, "size": size})
    sizes = multidev.shard_sizes(batch, k)
    step = lambda: reps.train_step(reps.place(multidev.cut(x, y, sizes)), 0.05)  # noqa: E731
    step()
    first = harness.since_start()
    step()
    rate = statistics.median(harness.samples_per_sec(step, batch, steps) for _ in range(repeats))
    return {"first_step_s": first, "samples_per_sec": rate, "compile_s": reps.compile_seconds,
            "warm": warm, "version": engine_version(engine),
            "threads": os.environ.get("OMP_NUM_THREADS", "")}


def loop_worker(backend: str, k: int, batch: int, size: int, model: str) -> dict[str, Any]:
    """The framework's own hand-written loop of the same network, batch and devices (the one ``bench_<framework>``
    times), in this fresh process: its first step's seconds since the process started, no engine of multidev's used
    (MXNet loads through the engine's loader, as every hand-written Gluon side here does: numpy 1.24+ needs it). It
    keeps what its framework keeps when asked (JAX's compilation cache, ``JAX_COMPILATION_CACHE_DIR``)."""
    harness.as_the_command()
    warm = kept()
    x, y = synthetic_batch({"batch": batch, "size": size})
    step, finish = LOOPS[backend](model, k, x, y)
    step()
    finish()
    return {"first_step_s": harness.since_start(), "warm": warm}


def torch_loop(model: str, k: int, x: np.ndarray, y: np.ndarray):
    """(the book's step in plain PyTorch, a wait for it: none, torch's CPU steps are done when they return)."""
    from bench.peers.torch_book import book_step

    return book_step(model, k, x, y, lr=0.05), lambda: None


def gluon_loop(model: str, k: int, x: np.ndarray, y: np.ndarray):
    """(the book's step in plain Gluon, a wait for it: none, the step reads its loss back)."""
    from bench.peers.gluon_book import book_step, mx

    return book_step(model, [mx.cpu(i) for i in range(k)], x, y.astype(np.float32), lr=0.05), lambda: None


def flax_loop(model: str, k: int, x: np.ndarray, y: np.ndarray):
    """(the Flax + Optax loop's step on exactly ``k`` CPU devices, a wait for the steps it queued): it makes the
    same seeded batch itself (``synthetic_batch``)."""
    from bench.jax_peers import handwritten_loop, start_jax

    options = {"model": model, "batch": len(x), "size": x.shape[-1], "gpu": False, "lr": 0.05, "sync_loss": False}
    start_jax(options, k, warm=False)
    step, finish, _ = handwritten_loop(options, k)
    return step, finish


LOOPS = {"torch": torch_loop, "mxnet": gluon_loop, "jax": flax_loop}


def kept() -> bool:
    """Whether an earlier round of this row kept anything in its cache home."""
    import os
    from pathlib import Path

    return any(p.is_file() for p in Path(os.environ["XDG_CACHE_HOME"]).rglob("*"))


def parse():
    p = harness.parser(__doc__)
    p.add_argument("--backends", default="torch")
    p.add_argument("--devices", default="1,2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=28)
    p.add_argument("--model", default="resnet18", choices=("resnet18", "lenet", "mlp"))
    p.add_argument("--steps", type=int, default=4, help="steps per timed window")
    p.add_argument("--repeats", type=int, default=3, help="timed windows per run (their median counts)")
    p.add_argument("--rounds", type=int, default=1, help="runs per row, device counts alternating (median)")
    p.add_argument("--peak-size", type=int, default=2048, help="the matrix product's n that measures the peak")
    return harness.parse(p, SMOKE)


def main() -> None:
    args = parse()
    harness.as_the_command()  # as the multidev command does: the workers inherit every usable core
    import multidev

    spec = multidev.ModelSpec(args.model, (1, args.size, args.size), 10)
    counts = [int(v) for v in args.devices.split(",")]
    work = training_flops(spec)
    report = harness.report(__file__, args, f"{args.model} {args.size}x{args.size}, batch {args.batch}, fp32; "
                            f"median of {args.rounds} run(s) of {args.repeats} x {args.steps} steps; "
                            f"{work / 1e9:.3f} GFLOP per training sample")
    runs = time_all(args, counts)
    top, source = peak(harness.machine.usable_cores(), args.peak_size)  # no worker holds a framework meanwhile
    report.note(f"peak {top:.0f} GFLOP/s, the larger of {source}")
    for backend in args.backends.split(","):
        one = None
        for k in counts:
            done = sorted(runs.get((backend, k, "engine"), []), key=lambda r: r["samples_per_sec"])
            row, one = summary(backend, k, done, one, work, top)
            row.update(loop_summary(row.get("first step s"), runs.get((backend, k, "loop"), [])))
            report.add(row)
    report.save()


def time_all(args, counts: list[int]) -> dict[tuple[str, int, str], list[dict[str, Any]]]:
    """Every (engine, device count, side)'s runs, the engine and its framework's own loop ("loop") alternating with
    the device counts within each round."""
    # the first round compiles cold, with no kept choice (each row's cache home its own: JAX's one device split in
    # two parts compiles the program of two devices), later ones load what it kept (a JAX run its programs); an
    # engine that keeps nothing stays cold
    cache = tempfile.mkdtemp(prefix="bench-compile-cache-")
    runs: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    try:
        for backend in args.backends.split(","):
            contenders = {}
            for k in counts:
                for side, fn in (("engine", worker), ("loop", loop_worker)):
                    home = f"{cache}/{backend}-{k}-{side}"  # one per row: another row's program is not its cold
                    env = {"MULTIDEV_COMPILE_CACHE": f"{home}/jax-compile", "XDG_CACHE_HOME": home,
                           "JAX_COMPILATION_CACHE_DIR": f"{home}/jax-compile" if side == "loop" else None}
                    options = {"steps": args.steps, "repeats": args.repeats} if side == "engine" else {}
                    contenders[(k, side)] = partial(harness.fresh, fn, env=env, label=f"{backend} x{k} {side}",
                                                    backend=backend, k=k, batch=args.batch, size=args.size,
                                                    model=args.model, **options)
            for (k, side), got in harness.rounds({key: failing_soft(run) for key, run in contenders.items()},
                                                 args.rounds).items():
                runs[(backend, k, side)] = [r for r in got if r is not None]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return runs


def failing_soft(run):
    """``run``, a failure printed and counted as no run (the other rows go on)."""
    def attempt():
        try:
            return run()
        except harness.ChildFailed as failed:
            print(failed, flush=True)
            return None
    return attempt


def summary(backend: str, k: int, done: list[dict[str, Any]], one, work: float, top: float):
    """(the row for ``k`` devices from its runs sorted by speed, one device's samples/s for the next rows)."""
    if not done:
        return {"engine": backend, "devices": k, "samples/s": "failed"}, one
    got = done[len(done) // 2]
    cold = [r for r in done if not r["warm"]]
    warm = [r["first_step_s"] for r in done if r["warm"]]
    one = got["samples_per_sec"] if k == 1 else one
    return {"engine": backend, "devices": k, "samples/s": got["samples_per_sec"],
            "vs 1 device": got["samples_per_sec"] / one if one else None,
            "% of fp32 peak": 100 * got["samples_per_sec"] * work / 1e9 / top,
            "first step s": min(r["first_step_s"] for r in cold) if cold else got["first_step_s"],
            "cached first step s": min(warm) if warm else None,
            "compile s": min(r["compile_s"] for r in cold) if cold else got["compile_s"],  # a cached one's: tracing
            "threads": got["threads"], "version": got["version"]}, one


def loop_summary(first: Optional[float], done: list[dict[str, Any]]) -> dict[str, Any]:
    """The framework's own loop's first steps (cold, and cached where its framework kept something), and the
    engine's cold first step over its loop's."""
    cold = [r["first_step_s"] for r in done if not r["warm"]]
    warm = [r["first_step_s"] for r in done if r["warm"]]
    return {"its loop's first step s": min(cold) if cold else None,
            "its loop's cached first step s": min(warm) if warm else None,
            "first step / its loop's": first / min(cold) if cold and first else None}


if __name__ == "__main__":
    main()
