"""multidev's JAX engine against a hand-written jitted Flax + Optax loop, same model, batch and devices.

The hand-written loop is what one would write without multidev: Flax's own
``nn.BatchNorm``, ``optax.sgd``, one ``jax.jit`` step with the batch sharded
over a device mesh and the parameters replicated (XLA partitions it; the
BatchNorm statistics are then the whole batch's, so it is compared with the
engine's ``--batchnorm sync`` by default). It runs on NHWC data prepared
once and does not wait for each step's loss; the engine splits every batch on
the host, pads it and reads each step's loss back once the next step is
queued, as the training loop does (``--engine-waits``: at once). The
ratio is engine samples/s over hand-written samples/s (1.0: no overhead).
Both use the engine's convolution precision (full float32: no TF32 on GPUs).

With Keras 3 installed (``pip install -c constraints.txt -e "./backends/jax[keras]"``)
the same run also times Keras' own data parallelism on the same JAX: the
same ResNet-18 (channels last, BatchNorm momentum 0.9, eps 1e-5), SGD, batch
and devices, through ``keras.distribution.DataParallel`` and
``train_on_batch`` (which reads its loss back every step, as the engine
does); without Keras that column is skipped with the reason.

Each contender runs in a process of its own (fresh JAX, same environment), as an
outside check would time it: in one process, whichever ran later inherited
the others' threads and memory (measured on an AMD EPYC: Keras 0.94 / 1.08 of
the engine in one process, 0.79 / 0.82 timed alone). ``--rounds`` alternates
them and keeps each one's median; ``--one-process`` is the old way.

    python bench/bench_jax.py                      # ~3 minutes on 2 CPU cores
    python bench/bench_jax.py --size 32 --batch 256 --steps 20 --devices 1,2,4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from functools import partial

import numpy as np


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    p.add_argument("--one-process", action="store_true", help="time all three in this process, one after another")
    p.add_argument("--alone", choices=CONTENDERS, help=argparse.SUPPRESS)  # one contender, in a process of its own
    return p.parse_args()


CONTENDERS = ("engine", "hand", "keras")


def alone(args: argparse.Namespace, name: str, k: int) -> tuple[float, float, str]:
    """(samples/s, compile or first-step s, forms) of one contender on ``k`` devices, timed in a fresh process."""
    done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--devices", str(k), "--alone", name],
                          capture_output=True, text=True, check=True)
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))  # type: ignore[return-value]


def main() -> None:
    args = parse()
    counts = [int(c) for c in args.devices.split(",")]
    os.environ.setdefault("MULTIDEV_COMPILE_CACHE", "off")  # compile columns: cold compiles, for all three alike
    from multidev import load_backend

    engine = load_backend("jax")
    # JAX's CPU device count is fixed when it starts. Timed alone, each contender gets what its user would give it:
    # the hand-written loop and Keras exactly k devices, the engine what a run of k devices plans (k, at least one
    # per core); in one process, every count's largest. The variable is set in the process that times, never in
    # the one that starts the others (they would inherit it)
    if args.alone in ("hand", "keras") or args.one_process:
        os.environ.setdefault("MULTIDEV_JAX_CPU_DEVICES", str(max(counts)))
    engine.plan_cpu_devices(max(counts))  # the engine's, where the variable is not set
    engine.max_cpu_devices()  # the engine gives JAX its CPU device count before JAX starts
    import jax

    from multidev.engines.registry import engine_version
    print(engine_version(engine), f"| JAX devices: {jax.devices()[0].platform} x{len(jax.devices())}",
          f"| host cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    if args.alone or args.one_process:  # where the timing happens: the launching process only waits
        warm_up()
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (args.batch, 1, args.size, args.size)).astype(np.float32)
    y = rng.integers(0, 10, args.batch).astype(np.int64)
    print(f"ResNet-18, {args.size}x{args.size}x1, batch {args.batch}, {args.warmup} warm-up + {args.steps} timed "
          f"steps, engine batchnorm={args.batchnorm}")
    keras_missing = keras_absent()
    if keras_missing:
        print(f"Keras 3: skipped ({keras_missing})")
    print(f"{'devices':>7} {'engine samples/s':>17} {'hand-written':>13} {'ratio':>6} {'keras':>7} "
          f"{'engine/keras':>12} {'engine compile s':>17} {'hand compile s':>15} {'keras first step s':>19}  "
          "engine's measured forms")
    timers = {"engine": partial(time_engine, engine), "hand": time_handwritten, "keras": time_keras}
    if args.alone:
        print(json.dumps(timers[args.alone](args, counts[0], x, y)))
        return
    names = [n for n in CONTENDERS if n != "keras" or not keras_missing]
    for k in counts:
        runs: dict[str, list[tuple[float, float, str]]] = {n: [] for n in names}
        for _ in range(args.rounds):
            for n in names:
                runs[n].append(timers[n](args, k, x, y) if args.one_process else alone(args, n, k))
        medians = {n: (statistics.median(r[0] for r in got), statistics.median(r[1] for r in got))
                   for n, got in runs.items()}
        eng_rate, eng_compile = medians["engine"]
        ref_rate, ref_compile = medians["hand"]
        ker_rate, ker_first = medians.get("keras", (float("nan"), float("nan")))
        print(f"{k:>7} {eng_rate:>17.1f} {ref_rate:>13.1f} {eng_rate / ref_rate:>6.2f} {ker_rate:>7.1f} "
              f"{eng_rate / ker_rate:>12.2f} {eng_compile:>17.2f} {ref_compile:>15.2f} {ker_first:>19.2f}  "
              f"{' | '.join(sorted({r[2] for r in runs['engine']}))}", flush=True)


def warm_up() -> None:
    """Pay JAX's and Flax's one-time costs (backend, first lowering of a convolution and its gradient) untimed.

    Otherwise they land on whichever compile is timed first: measured, the
    engine's and the hand-written loop's compiles swap their 0.2 s gap with
    the order they run in.
    """
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    model, x = nn.Conv(2, (3, 3)), jnp.ones((1, 4, 4, 1))
    params = model.init(jax.random.PRNGKey(0), x)
    jax.jit(jax.grad(lambda p: jnp.sum(model.apply(p, x)))).lower(params).compile()


def time_engine(engine, args, k: int, x: np.ndarray, y: np.ndarray) -> tuple[float, float, str]:
    import multidev
    from multidev import ModelSpec, resolve_devices, shard_sizes
    from multidev.training.ledger import resolved

    spec = ModelSpec("resnet18", x.shape[1:], 10)
    devices = resolve_devices(gpus=k, gpu_count=engine.gpu_count()) if args.gpu else \
        resolve_devices(devices=k, max_cpu=engine.max_cpu_devices())
    reps = multidev.replicate(engine, multidev.Setup(spec, devices, batchnorm=args.batchnorm), spec.init(0))
    sizes = shard_sizes(len(x), k)

    def run(steps: int) -> None:
        """As the training loop runs them: each step's sums read once the next step is queued."""
        held = None
        for _ in range(steps):
            queued = reps.train_step(reps.place(multidev.cut(x, y, sizes)), args.lr, pending=not args.engine_waits)
            if held is not None:
                resolved(held)
            held = queued
        if held is not None:
            resolved(held)

    run(args.warmup)
    start = time.perf_counter()
    run(args.steps)
    return args.steps * len(x) / (time.perf_counter() - start), reps.compile_seconds, forms()


def forms() -> str:
    """The forms the engine's measuring chose: devices whole or split (parts), each step's threads, BatchNorm's sums,
    the convolutions' inputs."""
    from multidev_jax import conv_inputs, parts, sums, threads

    def counted(chosen: dict[str, int]) -> str:
        return ", ".join(f"{form} {n}" for form, n in chosen.items() if n) or "none measured"

    def named(module) -> str:
        pinned = module.pinned()
        return f"{pinned} (pinned)" if pinned else counted(module._kept.counts())
    return (f"parts: {named(parts)}; threads: {named(threads)}; sums: {counted(sums._kept.counts())}; "
            f"conv inputs: {named(conv_inputs)}")


def time_handwritten(args, k: int, x: np.ndarray, y: np.ndarray) -> tuple[float, float, str]:
    """A minimal data-parallel Flax + Optax loop: jit, a sharded batch, replicated parameters."""
    import flax.linen as nn
    import jax
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    from multidev_jax.model import PRECISION  # same arithmetic as the engine: a fair race

    conv = partial(nn.Conv, precision=PRECISION)

    class Block(nn.Module):
        features: int
        stride: int

        @nn.compact
        def __call__(self, x, train: bool):
            norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5)
            y = conv(self.features, (3, 3), self.stride, padding=1, use_bias=False)(x)
            y = nn.relu(norm()(y))
            y = norm()(conv(self.features, (3, 3), padding=1, use_bias=False)(y))
            if self.stride != 1 or x.shape[-1] != self.features:
                x = conv(self.features, (1, 1), self.stride)(x)
            return nn.relu(y + x)

    class ResNet18(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            x = conv(64, (3, 3), padding=1, use_bias=False)(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x))
            for stage, width in enumerate((64, 128, 256, 512)):
                x = Block(width, 2 if stage else 1)(x, train)
                x = Block(width, 1)(x, train)
            return nn.Dense(10, precision=PRECISION)(x.mean(axis=(1, 2)))

    platform = "gpu" if args.gpu else "cpu"
    mesh = Mesh(np.array(jax.devices(platform)[:k]), ("batch",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    model, tx = ResNet18(), optax.sgd(args.lr)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    variables = jax.jit(partial(model.init, train=False))(jax.random.PRNGKey(0), nhwc[:1])
    params, stats = jax.device_put((variables["params"], variables["batch_stats"]), replicated)
    opt_state = jax.device_put(tx.init(params), replicated)

    def step(params, stats, opt_state, xb, yb):
        def loss_fn(p):
            logits, new = model.apply({"params": p, "batch_stats": stats}, xb, train=True, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean(), new["batch_stats"]
        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state, loss

    jitted = jax.jit(step, donate_argnums=(0, 1, 2), out_shardings=replicated)
    xb, yb = jax.device_put(nhwc, sharded), jax.device_put(y.astype(np.int32), sharded)
    start = time.perf_counter()
    compiled = jitted.lower(params, stats, opt_state, xb, yb).compile()
    compile_seconds = time.perf_counter() - start
    def run(steps: int) -> float:
        nonlocal params, stats, opt_state
        start = time.perf_counter()
        for _ in range(steps):
            params, stats, opt_state, loss = compiled(params, stats, opt_state, jax.device_put(nhwc, sharded),
                                                      jax.device_put(y.astype(np.int32), sharded))
            if args.sync_loss:
                float(loss)
        jax.block_until_ready(params)
        return time.perf_counter() - start

    run(args.warmup)
    return args.steps * len(x) / run(args.steps), compile_seconds, ""


def keras_absent() -> str:
    """Why Keras 3 on JAX cannot be timed here ('' when it can)."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    try:
        import keras
    except ImportError:
        return 'Keras is not installed: pip install -c constraints.txt -e "./backends/jax[keras]"'
    if not keras.__version__.startswith("3.") or keras.backend.backend() != "jax":
        return f"Keras {keras.__version__} on {keras.backend.backend()}: need Keras 3 on JAX (KERAS_BACKEND=jax)"
    return ""


def time_keras(args, k: int, x: np.ndarray, y: np.ndarray) -> tuple[float, float, str]:
    """(samples/s, seconds to the first finished step) of Keras 3's DataParallel on the same job."""
    import jax
    import keras
    from keras import layers

    platform = "gpu" if args.gpu else "cpu"
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices(platform)[:k]))
    keras.utils.set_random_seed(0)

    def norm(z):
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(z)

    def block(z, width: int, stride: int):
        h = layers.Conv2D(width, 3, stride, padding="same", use_bias=False)(z)
        h = layers.ReLU()(norm(h))
        h = norm(layers.Conv2D(width, 3, padding="same", use_bias=False)(h))
        if stride != 1 or z.shape[-1] != width:
            z = layers.Conv2D(width, 1, stride)(z)
        return layers.ReLU()(layers.Add()([h, z]))

    inputs = keras.Input((args.size, args.size, 1))
    z = layers.ReLU()(norm(layers.Conv2D(64, 3, padding="same", use_bias=False)(inputs)))
    for stage, width in enumerate((64, 128, 256, 512)):
        z = block(block(z, width, 2 if stage else 1), width, 1)
    model = keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(z)))
    model.compile(optimizer=keras.optimizers.SGD(args.lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    start = time.perf_counter()
    model.train_on_batch(nhwc, y)  # compiles, then runs the first step
    first = time.perf_counter() - start
    for _ in range(args.warmup - 1):
        model.train_on_batch(nhwc, y)
    start = time.perf_counter()
    for _ in range(args.steps):
        model.train_on_batch(nhwc, y)
    keras.distribution.set_distribution(None)
    return args.steps * len(x) / (time.perf_counter() - start), first, ""


if __name__ == "__main__":
    main()
