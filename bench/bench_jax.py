"""multidev's JAX engine against a hand-written jitted Flax + Optax loop and Keras 3, same model, batch and devices.

The hand-written loop is what one would write without multidev: Flax's own
``nn.BatchNorm``, ``optax.sgd``, one ``jax.jit`` step with the batch sharded
over a device mesh and the parameters replicated (XLA partitions it; the
BatchNorm statistics are then the whole batch's, so it is compared with the
engine's ``--batchnorm sync`` by default). It runs on NHWC data prepared
once and does not wait for each step's loss; the engine splits every batch on
the host, pads it and reads each step's loss back once the next step is
queued, as the training loop does (``--engine-waits``: at once). The
ratio is engine samples/s over hand-written samples/s (1.0: no overhead).
Both compute in full float32 (no TF32 on GPUs), as the engine's float32 does.

With Keras 3 installed (``pip install -c constraints.txt -e "./backends/jax[keras]"``)
the same run also times Keras' own data parallelism on the same JAX: the
same ResNet-18 (channels last, BatchNorm momentum 0.9, eps 1e-5), SGD, batch
and devices, through ``keras.distribution.DataParallel`` and
``train_on_batch`` (which reads its loss back every step, as the engine
does); without Keras that column is skipped with the reason.

Each contender runs in a process of its own (``bench.harness.fresh``: fresh
JAX, same environment), as an outside check would time it: in one process,
whichever ran later inherited the others' threads and memory. ``--rounds``
alternates them and keeps each one's median. The hand-written loop and Keras
get exactly k CPU devices, as their users would set; the engine what a run of
k devices plans (k, at least one per core). Compiles are cold
(``MULTIDEV_COMPILE_CACHE=off``) for all three alike.

    python -m bench.bench_jax                      # ~3 minutes on 2 CPU cores
    python -m bench.bench_jax --size 32 --batch 256 --steps 20 --devices 1,2,4
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

from bench import harness
from bench.jax_peers import keras_absent, synthetic_batch, time_handwritten, time_keras, warm_up

SMOKE = {"model": "mlp", "size": 8, "batch": 4, "steps": 1, "warmup": 1, "devices": "1", "rounds": 1}


def parse():
    p = harness.parser(__doc__)
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mlp"),
                   help="the network all three train (mlp: a smoke run's, compiled in seconds)")
    p.add_argument("--size", type=int, default=28, help="image height and width (synthetic, 1 channel)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=5, help="timed steps, after --warmup untimed ones")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--devices", default="1,2", help="device counts to time, comma-separated")
    p.add_argument("--gpu", action="store_true", help="use GPUs instead of virtual CPU devices")
    p.add_argument("--batchnorm", default="sync", choices=("sync", "local"), help="the engine's BatchNorm mode")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--sync-loss", action="store_true",
                   help="the hand-written loop also reads its loss back every step, as the engine must")
    p.add_argument("--engine-waits", action="store_true",
                   help="the engine's steps read their loss back at once, not after the next step is queued")
    p.add_argument("--rounds", type=int, default=1, help="alternating runs of the three; each one's median")
    return harness.parse(p, SMOKE)


def main() -> None:
    args = parse()
    options = {k: getattr(args, k) for k in ("model", "size", "batch", "steps", "warmup", "gpu", "batchnorm", "lr",
                                             "sync_loss", "engine_waits")}
    keras_missing = keras_absent()
    report = harness.report(__file__, args, f"{args.model}, {args.size}x{args.size}x1, batch {args.batch}, "
                            f"{args.warmup} warm-up + {args.steps} timed steps, {args.rounds} round(s), engine "
                            f"batchnorm={args.batchnorm}, {'GPUs' if args.gpu else 'virtual CPU devices'}",
                            gpu=args.gpu)
    if keras_missing:
        report.note(f"Keras 3: skipped ({keras_missing})")
    # the compile columns are cold compiles, for all three alike; the environment of a contender is its own
    env: dict[str, Any] = {"MULTIDEV_COMPILE_CACHE": os.environ.get("MULTIDEV_COMPILE_CACHE", "off"),
                           "KERAS_BACKEND": "jax"}
    timers = {"engine": time_engine, "hand": time_handwritten, "keras": time_keras}
    names = [n for n in timers if n != "keras" or not keras_missing]
    for k in (int(c) for c in args.devices.split(",")):
        contenders = {n: partial(harness.fresh, timers[n], env=env, label=f"{n} x{k}", options=options, k=k)
                      for n in names}
        runs = harness.rounds(contenders, args.rounds)
        report.add(row(k, runs))
    report.save()


def row(k: int, runs: dict[str, list[list]]) -> dict[str, Any]:
    """The table's row for ``k`` devices: each contender's median samples/s and compile seconds, the ratios."""
    median = {n: harness.medians({"rate": [r[0] for r in got], "compile": [r[1] for r in got]})
              for n, got in runs.items()}
    absent = {"rate": None, "compile": None}  # Keras not installed
    engine, hand, keras = median["engine"], median["hand"], median.get("keras", absent)
    return {"devices": k, "engine samples/s": engine["rate"], "hand-written samples/s": hand["rate"],
            "engine / hand-written": engine["rate"] / hand["rate"], "keras samples/s": keras["rate"],
            "engine / keras": engine["rate"] / keras["rate"] if keras["rate"] else None,
            "engine compile s": engine["compile"],
            "hand-written compile s": hand["compile"], "keras first step s": keras["compile"],
            "engine's forms": "; ".join(sorted({r[2] for r in runs["engine"]}))}


def time_engine(options: dict[str, Any], k: int) -> tuple[float, float, str]:
    """(samples/s, compile s, forms) of the engine on ``k`` devices, its steps run as the training loop runs them:
    each step's sums read once the next step is queued."""
    import multidev

    engine = multidev.load_backend("jax")
    devices = harness.run_devices(engine, k, options["gpu"])
    warm_up()
    x, y = synthetic_batch(options)
    spec = multidev.ModelSpec(options["model"], x.shape[1:], 10)
    reps = multidev.replicate(engine, multidev.Setup(spec, devices, batchnorm=options["batchnorm"]), spec.init(0))
    sizes = multidev.shard_sizes(len(x), k)

    queue = getattr(reps, "queue_step", None) if not options["engine_waits"] else None

    def run(steps: int) -> None:
        held = None
        for _ in range(steps):
            placed = reps.place(multidev.cut(x, y, sizes))
            queued = queue(placed, options["lr"]) if queue else reps.train_step(placed, options["lr"])
            if held is not None:
                held.result()
            held = queued if queue else None
        if held is not None:
            held.result()

    run(options["warmup"])
    start = time.perf_counter()
    run(options["steps"])
    return options["steps"] * len(x) / (time.perf_counter() - start), reps.compile_seconds, forms(reps)


def forms(reps: object) -> str:
    """The forms the engine's measuring chose for these replicas, where its replicas say (``forms``)."""
    chosen = getattr(reps, "forms", None)
    if chosen is None:
        return "not reported by the engine's replicas"
    if hasattr(chosen, "__dataclass_fields__"):
        chosen = {name: getattr(chosen, name) for name in chosen.__dataclass_fields__}
    if isinstance(chosen, dict):
        return ", ".join(f"{name} {value}" for name, value in chosen.items())
    if isinstance(chosen, (set, frozenset, list, tuple)):
        return ", ".join(sorted(map(str, chosen))) or "none"
    return str(chosen)


if __name__ == "__main__":
    main()
