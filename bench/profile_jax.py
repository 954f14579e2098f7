"""Where a JAX engine step's time goes: XLA:CPU's operations by kind, from ``jax.profiler``.

Traces a few ResNet-18 training steps of the engine (host tracer level 3, so
XLA:CPU's thunks appear) and prints the time per step of each kind of HLO
operation (``convolution``, ``transpose_copy_fusion``, ``reduce-window``,
...), largest first. This is how issue 14 found BatchNorm's sums running as
reduce-windows (47% of a step) and the weight gradients' layout transposes.
Events are per operation as XLA:CPU dispatches it; work it runs on its thread
pool can outlast the event, so the kinds add up to less than the step.
With ``--dump FOLDER`` XLA also writes the optimised HLO there (look for
``jit_train*after_optimizations.txt``) to see what an operation computes.

    python -m bench.profile_jax                  # 1 device, batch 64, 28x28
    python -m bench.profile_jax --devices 2 --batchnorm local --top 30
    python -m bench.profile_jax --model mobilenet_v2 --size 32 --channels 3 --batch 32
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time

import numpy as np

from bench import harness

SMOKE = {"model": "mlp", "batch": 4, "size": 8, "steps": 1, "top": 5}


def parse() -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mobilenet_v2", "vit", "mlp"),
                   help="a network of the zoo (mlp: a smoke run's)")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=28, help="image height and width (synthetic)")
    p.add_argument("--channels", type=int, default=1, help="image channels (the model table's: 3)")
    p.add_argument("--batchnorm", default="sync", choices=("sync", "local"))
    p.add_argument("--steps", type=int, default=2, help="traced steps, after 2 untraced ones")
    p.add_argument("--top", type=int, default=15, help="kinds of operation to print")
    p.add_argument("--dump", help="also write XLA's optimised HLO to this folder")
    return harness.parse(p, SMOKE)


def main() -> None:
    args = parse()
    if args.dump:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={args.dump} --xla_dump_hlo_as_text"
    import multidev

    engine = multidev.load_backend("jax")
    devices = harness.run_devices(engine, args.devices)  # as a run does: its devices, at least one per core
    import jax

    spec = multidev.ModelSpec(args.model, (args.channels, args.size, args.size), 10)
    reps = multidev.replicate(engine, multidev.Setup(spec, devices, batchnorm=args.batchnorm), spec.init(0))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, *spec.in_shape)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    sizes = multidev.shard_sizes(args.batch, args.devices)

    def step() -> None:  # Dropout's masks as the core draws them; the sums read back: the step is over
        reps.train_step(reps.place(harness.training_shards(reps, x, y, sizes, 1)), 0.01)

    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = (time.perf_counter() - start) / args.steps
    with tempfile.TemporaryDirectory() as folder:
        options = jax.profiler.ProfileOptions()
        options.host_tracer_level = 3  # XLA:CPU's per-operation events
        jax.profiler.start_trace(folder, create_perfetto_trace=True, profiler_options=options)
        for _ in range(args.steps):
            step()
        jax.profiler.stop_trace()
        trace = json.load(gzip.open(glob.glob(f"{folder}/**/*.trace.json.gz", recursive=True)[0]))
    report(trace["traceEvents"] if isinstance(trace, dict) else trace, args, seconds)


def kind(name: str) -> str:
    """An HLO instruction's kind: its name without the numbers XLA appends (``convolution.12.clone``)."""
    return re.sub(r"(\.clone)?$", "", re.sub(r"[._]\d+", "", name))


def report(events: list[dict], args: argparse.Namespace, seconds: float) -> None:
    per_kind: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for event in events:
        name = event.get("name", "")
        # XLA:CPU's operations; not Python frames ($...), the executor, parallel-task wrappers or listeners
        if event.get("ph") != "X" or name.startswith(("$", "call", "end:")) or any(c in name for c in ":( "):
            continue
        per_kind[kind(name)] += event.get("dur", 0) / 1e3 / args.steps
        calls[kind(name)] += 1
    out = harness.report(__file__, args, f"{args.model} {args.size}x{args.size}x{args.channels}, batch {args.batch}, "
                         f"{args.devices} device(s), batchnorm {args.batchnorm}: {seconds:.3f} s a step untraced; "
                         "XLA operations by kind")
    for name, ms in per_kind.most_common(args.top):
        out.add({"kind": name, "ms a step": ms, "calls a step": calls[name] // args.steps})
    out.note(f"{sum(per_kind.values()):.1f} ms a step in all. Operations that XLA:CPU hands to its thread pool "
             "(convolutions, matrix products) can end after their event does: the rest of the step is theirs and "
             "the executor's")
    out.save()


if __name__ == "__main__":
    main()
