"""The model table: each engine against its framework's hand-written loop, on ResNet-50, MobileNetV2 and a ViT.

For every network and device count, seven contenders train the same
architecture on the same synthetic batch (float32, SGD with momentum, mean
cross-entropy), each in a fresh process of its own (``bench.harness.fresh``),
``--rounds`` times in turn, threads as the ``multidev`` command sets them:

- multidev's torch, JAX and MXNet engines (``multidev.replicate``, each
  step's batch cut, given the core's Dropout masks and placed on the core's
  prefetch thread while the step before runs, as the training loop does; the
  JAX engine's steps queued, their sums read once the next is queued);
- torchvision's own module in a plain PyTorch loop (``bench.peers.torch_loop``),
  a jitted Flax + Optax step over a device mesh (``bench.peers.flax_loop``),
  Keras 3's ``DataParallel`` on the same JAX (``bench.peers.keras_loop``) and a
  hybridized Gluon network (``bench.peers.gluon_loop``).

The networks (``bench.peers.nets``): torchvision's ``resnet50`` and its
``MobileNetV2`` on the zoo's stage table (stem and first two stages at stride
1), which multidev reads from their ONNX export (``nn.from_onnx``, as a user
brings them), and the zoo's ``vit`` (torchvision's ``VisionTransformer`` on
the torch side). Flax, Keras and Gluon are written layer for layer in
``bench/peers/``; each contender asserts its parameter count equals
multidev's network's, and the table prints it. Per engine the row gives its
samples/s (the median run's median window), its ratio to its hand-written
loop, to Keras (JAX) and to the fastest engine on that network, and each
first step's seconds since its process started (imports, building, a cold
compile: ``MULTIDEV_COMPILE_CACHE=off``, for all alike; the JAX engine takes
the forms shipped for this CPU kind, as a run does). Keras'
second ``train_on_batch`` compiles again (2.7 s on the smoke ViT here), so
``--warmup`` is 2. "targets" checks the issue's figures: every engine at
least 0.95 of its hand-written loop, JAX at least 1.1 of Keras, torch and
MXNet at least 0.8 of the fastest engine. The notes give every contender's
parameter count and the forms each engine chose.

    python -m bench.bench_models                          # 3 networks at 32x32x3, batch 32, 1 device
    python -m bench.bench_models --devices 1,2 --models vit --rounds 5
    python -m bench.bench_models --gpu --engines torch,jax --batch 256    # on a GPU: each row's share of its peak

On GPUs (``--gpu``) the loops and engines compute in full float32 (TF32 off,
as the engines have it unless a run opts in), and each row adds its TFLOP/s
and share of the data sheet's float32 peak, the work counted by torch's flop
counter on torchvision's network (``bench.peers.torch_models.training_flops``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

import numpy as np

from bench import harness
from bench.bench_jax import forms
from bench.harness.flops import gpu_peak
from bench.jax_peers import keras_absent
from bench.peers.flax_loop import time_flax
from bench.peers.gluon_loop import time_gluon
from bench.peers.keras_loop import time_keras
from bench.peers.measure import checked, measure, synthetic
from bench.peers.nets import CLASSES, NAMES, Net, uses_onnx
from bench.peers.torch_loop import time_torch

SMOKE = {"size": 8, "batch": 4, "devices": "1", "warmup": 1, "steps": 1, "repeats": 1, "rounds": 1, "timeout": 300}
#: the issue's figures: engine / its hand-written loop, the JAX engine / Keras, torch and MXNet / the fastest engine
TARGETS = {"hand-written": 0.95, "keras": 1.1, "fastest": 0.8}
ENGINES = ("torch", "jax", "mxnet")


@dataclass(frozen=True)
class Contender:
    """One column's process: whose row it fills (``engine``), as what (``role``), and the function timing it."""

    label: str
    engine: str
    role: str  # "engine", "hand-written" or "keras"
    timer: Callable[..., dict[str, Any]]  # a module-level function: the fresh process imports it by name
    extra: tuple[tuple[str, Any], ...] = ()  # its own keyword arguments, beside those every contender takes


def time_engine(backend: str, onnx: Optional[str], batchnorm: str, name: str, size: int, smoke: bool, k: int,
                batch: int, lr: float, momentum: float, warmup: int, steps: int, repeats: int,
                expected: int, gpu: bool = False) -> dict[str, Any]:
    """Samples/s, first step and parameter count of multidev's engine ``backend`` on ``k`` devices (GPUs where
    ``gpu``; a fresh process), its steps run as the training loop runs them."""
    harness.as_the_command()  # before any framework loads (a parent's setting stands)
    import multidev
    from multidev.engine import Optimizer
    from multidev.engines.registry import engine_version

    engine = multidev.load_backend(backend)
    devices = harness.run_devices(engine, k, gpu)
    if backend == "jax":
        from bench.jax_peers import warm_up
        warm_up()  # as the Flax and Keras processes do
    spec = definition(Net.of(name, size, smoke), onnx)
    setup = multidev.Setup(spec, tuple(devices), batchnorm=batchnorm if backend == "jax" else "local",
                           optimizer=Optimizer("sgd", momentum=momentum), rows=batch)
    reps = multidev.replicate(engine, setup, spec.init(0))
    queued = "pending_stats" in engine.capabilities  # as the training loop (late sums, its default)
    step, finish = engine_steps(reps, *synthetic(batch, size), k, lr, queued)
    timed = measure(step, finish, batch=batch, warmup=warmup, steps=steps, repeats=repeats)
    return {**timed, "params": checked(parameters(spec), expected, f"the {backend} engine's network"),
            "version": engine_version(engine), "forms": forms(reps)}


def engine_steps(reps: Any, x: np.ndarray, y: np.ndarray, k: int, lr: float,
                 queued: bool) -> tuple[Callable[[], None], Callable[[], None]]:
    """(a step, waiting for the last one), as the training loop runs them: the batch cut, its Dropout masks drawn
    and placed on the core's prefetch thread while the step before runs; ``queued``, each step's sums read once
    the next one is queued."""
    import multidev
    from multidev.training.prefetch import ahead

    sizes = multidev.shard_sizes(len(x), k)
    queue, held = reps.queue_step if queued else None, []

    def prepare(n: int) -> Any:
        return reps.place(harness.training_shards(reps, x, y, sizes, n))

    placed = ahead(prepare, itertools.count(1))

    def finish() -> None:
        while held:
            held.pop().result()

    def step() -> None:
        if queue is None:
            reps.train_step(next(placed), lr)
            return
        pending = queue(next(placed), lr)
        finish()
        held.append(pending)

    return step, finish


def definition(net: Net, onnx: Optional[str]) -> Any:
    """multidev's network: torchvision's, read from its ONNX export, or the zoo's ViT at the net's sizes."""
    import multidev

    if onnx:
        with warnings.catch_warnings():  # a training-mode export's BatchNorm nodes, each read as BatchNorm
            warnings.filterwarnings("ignore", message=".*training_mode 1")
            graph = multidev.nn.from_onnx(onnx)
    else:
        graph = multidev.nn.vit(patch=net.patch, dim=net.dim, depth=net.depth, heads=net.heads, mlp=net.mlp).graph()
    return multidev.ModelSpec(net.name, net.in_shape, CLASSES, graph)


def parameters(spec: Any) -> int:
    """Trainable values of a multidev definition (BatchNorm's running statistics left out, as torch's buffers)."""
    return sum(int(np.prod(p.shape)) for p in spec.params() if p.trainable)


def contenders(engines: list[str], keras: bool, onnx: Optional[str], batchnorm: str) -> list[Contender]:
    """The processes of one network's row group: each engine, then its framework's hand-written loop (and Keras)."""
    peers: dict[str, list[Contender]] = {
        "torch": [Contender("torchvision", "torch", "hand-written", time_torch)],
        "jax": [Contender("Flax + Optax", "jax", "hand-written", time_flax)]
        + ([Contender("Keras 3", "jax", "keras", time_keras)] if keras else []),
        "mxnet": [Contender("Gluon", "mxnet", "hand-written", time_gluon)]}
    found = []
    for engine in engines:
        own = (("backend", engine), ("onnx", onnx), ("batchnorm", batchnorm))
        found += [Contender(f"{engine} engine", engine, "engine", time_engine, own), *peers[engine]]
    return found


def parse() -> argparse.Namespace:
    """The command line, checked: only the table's networks and multidev's engines."""
    p = harness.parser(__doc__)
    p.add_argument("--models", default=",".join(NAMES), help=f"networks, comma-separated, of {', '.join(NAMES)}")
    p.add_argument("--engines", default=",".join(ENGINES), help="engines (each with its framework's peers)")
    p.add_argument("--devices", default="1", help="device counts to time, comma-separated (e.g. 1,2)")
    p.add_argument("--gpu", action="store_true",
                   help="on GPUs (--devices counts them), each row with its share of the GPU's float32 peak")
    p.add_argument("--size", type=int, default=32, help="image height and width (3 channels)")
    p.add_argument("--batch", type=int, default=32, help="minibatch over all devices")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (the first step's seconds among them)")
    p.add_argument("--steps", type=int, default=5, help="steps per timed window")
    p.add_argument("--repeats", type=int, default=3, help="timed windows per run (their median counts)")
    p.add_argument("--rounds", type=int, default=3, help="runs of every contender, in turn (the median run counts)")
    p.add_argument("--jax-batchnorm", default="sync", choices=("sync", "local"),
                   help="the JAX engine's BatchNorm: sync, as Flax's and Keras' sharded steps see the whole batch")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a contender's process may take")
    args = harness.parse(p, SMOKE)
    for option, value, known in (("--models", args.models, NAMES), ("--engines", args.engines, ENGINES)):
        unknown = sorted(set(value.split(",")) - set(known))
        if unknown:
            p.error(f"{option}: unknown {', '.join(unknown)}: choose of {', '.join(known)}")
    return args


def main() -> None:
    """Every network's ONNX file and parameter count first, then its contenders per device count, row by row."""
    args = parse()
    harness.as_the_command()  # every usable core, before any framework loads: the contenders inherit it
    names, counts = args.models.split(","), [int(k) for k in args.devices.split(",")]
    keras_missing = keras_absent()
    report = harness.report(__file__, args, f"{', '.join(names)} at {args.size}x{args.size}x3, batch {args.batch}, "
                            f"float32, SGD lr {args.lr} momentum {args.momentum}; {args.warmup} warm-up step(s), "
                            f"the median of {args.repeats} x {args.steps} steps per run, the median of {args.rounds} "
                            f"run(s) of every contender in a fresh process; OMP_NUM_THREADS="
                            f"{os.environ['OMP_NUM_THREADS']}; JAX engine batchnorm={args.jax_batchnorm}"
                            + ("; on GPUs, full float32 (no TF32)" if args.gpu else ""), gpu=args.gpu)
    if keras_missing:
        report.note(f"Keras 3: skipped ({keras_missing})")
    folder = tempfile.mkdtemp(prefix="bench-models-")
    failed: list[str] = []
    try:
        for name in names:
            onnx = export(name, args, folder) if uses_onnx(Net.of(name, args.size, args.smoke)) else None
            expected = network_parameters(name, args, onnx, report)
            work = sample_flops(name, args) if args.gpu else None
            for k in counts:
                runs = time_model(contenders(args.engines.split(","), not keras_missing, onnx, args.jax_batchnorm),
                                  name, k, expected, args, failed)
                for row in rows(name, k, expected, runs):
                    report.add({**row, **gpu_share(row, work)} if work else row)
                report.note(counted(name, k, runs))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for line in failed:
        report.note(f"failed: {line}")
    report.save()
    if failed:
        raise SystemExit(f"bench_models: {len(failed)} contender run(s) failed (above)")


def export(name: str, args: argparse.Namespace, folder: str) -> str:
    """torchvision's ``name`` exported to ONNX in a process of its own (this one loads no framework)."""
    from bench.peers.torch_models import export as write

    path = os.path.join(folder, f"{name}.onnx")
    return harness.fresh(write, label=f"export {name}", timeout=args.timeout, name=name, size=args.size,
                         smoke=args.smoke, path=path)


def sample_flops(name: str, args: argparse.Namespace) -> int:
    """A training step's work per sample, counted by torch in a process of its own (this one loads no framework)."""
    from bench.peers.torch_models import training_flops

    return harness.fresh(training_flops, label=f"count {name}'s work", timeout=args.timeout, name=name,
                         size=args.size, smoke=args.smoke)


def gpu_share(row: dict[str, Any], work: int) -> dict[str, Any]:
    """The engine's TFLOP/s and its share of the GPU's float32 peak (the data sheet's, for all devices)."""
    rate = row["engine samples/s"]
    if not isinstance(rate, float):
        return {"TFLOP/s": None, "share of fp32 peak": ""}
    top = gpu_peak("fp32")
    tflops = rate * work / 1e12
    share = f"{100 * tflops / (top * row['devices']):.1f}% of {top * row['devices']:.0f}" if top else "peak unknown"
    return {"TFLOP/s": tflops, "share of fp32 peak": share}


def network_parameters(name: str, args: argparse.Namespace, onnx: Optional[str], report: harness.Report) -> int:
    """multidev's network's parameter count, which every contender must have; at full size MobileNetV2's must be the
    zoo's own ``mobilenet_v2``'s too (the zoo's architecture, imported from torchvision)."""
    import multidev

    net = Net.of(name, args.size, args.smoke)
    count = parameters(definition(net, onnx))
    if name == "mobilenet_v2" and net == Net.of(name, args.size):
        zoo = parameters(multidev.ModelSpec(name, net.in_shape, CLASSES))
        checked(count, zoo, "the zoo's mobilenet_v2")
        report.note(f"{name}: torchvision's network read from ONNX has the zoo's mobilenet_v2's {zoo:,} parameters")
    return count


def time_model(found: list[Contender], name: str, k: int, expected: int, args: argparse.Namespace,
               failed: list[str]) -> dict[Contender, list[dict[str, Any]]]:
    """Every contender's runs on ``name`` with ``k`` devices, each once a round in turn; a failed run is printed,
    listed in ``failed`` and left out."""
    env = {"MULTIDEV_COMPILE_CACHE": os.environ.get("MULTIDEV_COMPILE_CACHE", "off"), "KERAS_BACKEND": "jax"}
    common = {"name": name, "size": args.size, "smoke": args.smoke, "k": k, "batch": args.batch, "lr": args.lr,
              "momentum": args.momentum, "warmup": args.warmup, "steps": args.steps, "repeats": args.repeats,
              "expected": expected, "gpu": args.gpu}

    def run(c: Contender) -> Optional[dict[str, Any]]:
        try:
            return harness.fresh(c.timer, env=env, timeout=args.timeout, label=f"{c.label} {name} x{k}",
                                 **common, **dict(c.extra))
        except harness.ChildFailed as error:
            print(error, flush=True)
            failed.append(str(error))
            return None

    got = harness.rounds({c: partial(run, c) for c in found}, args.rounds)
    return {c: [r for r in runs if r is not None] for c, runs in got.items()}


def median_run(runs: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The run of median samples/s (the upper one of an even count), None without runs."""
    ranked = sorted(runs, key=lambda r: r["samples_per_sec"])
    return ranked[len(ranked) // 2] if ranked else None


def rows(name: str, k: int, expected: int, runs: dict[Contender, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per engine, from each contender's median run."""
    kept = {c: median_run(r) for c, r in runs.items()}
    engines = [c for c in runs if c.role == "engine"]
    rates = [value(kept, c, "samples_per_sec") for c in engines]
    fastest = max((r for r in rates if r is not None), default=None) if len(engines) > 1 else None
    return [row(name, k, expected, engine, kept, fastest) for engine in engines]


def row(name: str, k: int, expected: int, engine: Contender, kept: dict[Contender, Optional[dict[str, Any]]],
        fastest: Optional[float]) -> dict[str, Any]:
    """An engine's rate, its hand-written loop's, Keras' (JAX), the ratios, the first steps and the targets."""
    peer = {c.role: c for c in kept if c.engine == engine.engine and c.role != "engine"}
    hand, keras = peer.get("hand-written"), peer.get("keras")
    mine = value(kept, engine, "samples_per_sec")
    ratios = {"hand-written": ratio(mine, value(kept, hand, "samples_per_sec")),
              "keras": ratio(mine, value(kept, keras, "samples_per_sec")), "fastest": ratio(mine, fastest)}
    return {"model": name, "devices": k, "engine": engine.engine, "params": f"{expected:,}",
            "engine samples/s": mine if mine is not None else "failed", "hand-written": hand.label if hand else "",
            "hand-written samples/s": value(kept, hand, "samples_per_sec"),
            "engine / hand-written": ratios["hand-written"], "engine / fastest engine": ratios["fastest"],
            "Keras samples/s": value(kept, keras, "samples_per_sec"), "engine / Keras": ratios["keras"],
            "engine first step s": value(kept, engine, "first_step_s"),
            "hand-written first step s": value(kept, hand, "first_step_s"),
            "Keras first step s": value(kept, keras, "first_step_s"), "targets": targets(engine.engine, ratios)}


def value(kept: dict[Contender, Optional[dict[str, Any]]], who: Optional[Contender], key: str) -> Optional[float]:
    """``key`` of ``who``'s median run (None where it is not a contender or no run of it finished)."""
    run = kept.get(who) if who is not None else None
    return run[key] if run else None


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """a / b, None where either is missing (a failed or skipped contender)."""
    return a / b if a is not None and b else None


def targets(engine: str, ratios: dict[str, Optional[float]]) -> str:
    """The issue's figures this engine's row is held to: "met", or what fell short ("" where none was measured)."""
    wanted = ["hand-written"] + (["keras"] if engine == "jax" else ["fastest"])
    measured = {key: ratios[key] for key in wanted if ratios[key] is not None}
    short = [f"{value:.3f} < {TARGETS[key]} of {key}" for key, value in measured.items() if value < TARGETS[key]]
    return ("missed: " + "; ".join(short)) if short else "met" if measured else ""


def counted(name: str, k: int, runs: dict[Contender, list[dict[str, Any]]]) -> str:
    """A line of every contender's parameter count (each asserted equal to multidev's network's in its process), and
    each engine's versions and the forms its runs chose."""
    counts = [f"{c.label} {r[0]['params']:,}" for c, r in runs.items() if r]
    engines = [f"{c.engine} ({r[0]['version']}; forms: {' | '.join(sorted({run['forms'] for run in r}))})"
               for c, r in runs.items() if r and c.role == "engine"]
    return f"{name} x{k}: parameters {', '.join(counts)}; engines {', '.join(engines)}"


if __name__ == "__main__":
    main()
