"""What bench_jax times the JAX engine against: a hand-written Flax + Optax loop, and Keras 3's DataParallel.

Plain JAX code, as a user writes it without multidev: each gets exactly the
``k`` CPU devices its run names (``jax_num_cpu_devices``, set before JAX
starts), and computes in full float32 (``Precision.HIGHEST``: no TF32 on a
GPU), as the engine's float32 does. Each function runs in a fresh process
(``bench.harness.fresh``) and returns (samples/s, compile or first-step
seconds, '').
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any, Callable

import numpy as np


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


def start_jax(options: dict[str, Any], k: int, warm: bool = True) -> None:
    """JAX with exactly ``k`` CPU devices (unless on GPUs), as a user sets them before JAX starts, then warmed up
    (unless ``warm`` is false: a first step timed from the process's start pays what a user's does)."""
    import jax

    if not options["gpu"]:
        jax.config.update("jax_num_cpu_devices", k)
    if warm:
        warm_up()


def synthetic_batch(options: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The one batch every contender trains on (the same in every process: seeded)."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (options["batch"], 1, options["size"], options["size"])).astype(np.float32)
    return x, rng.integers(0, 10, options["batch"]).astype(np.int64)


def flax_model(name: str):
    """The network ``name`` (resnet18, or mlp for a smoke run) in Flax, full float32 arithmetic."""
    return flax_resnet18() if name == "resnet18" else flax_mlp()


def flax_mlp():
    """multidev's ``mlp``: the image flattened, two hidden layers of 256."""
    import flax.linen as nn
    import jax

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            x = x.reshape(len(x), -1)
            for width in (256, 256):
                x = nn.relu(nn.Dense(width, precision=jax.lax.Precision.HIGHEST)(x))
            return nn.Dense(10, precision=jax.lax.Precision.HIGHEST)(x)

    return Mlp()


def flax_resnet18():
    """The book's small-image ResNet-18 in Flax: BatchNorm momentum 0.9, eps 1e-5, full float32 arithmetic."""
    import flax.linen as nn
    import jax

    conv = partial(nn.Conv, precision=jax.lax.Precision.HIGHEST)

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
            return nn.Dense(10, precision=jax.lax.Precision.HIGHEST)(x.mean(axis=(1, 2)))

    return ResNet18()


def time_handwritten(options: dict[str, Any], k: int) -> tuple[float, float, str]:
    """A minimal data-parallel Flax + Optax loop: jit, a sharded batch, replicated parameters."""
    start_jax(options, k)
    step, finish, compile_seconds = handwritten_loop(options, k)

    def run(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        finish()
        return time.perf_counter() - start

    run(options["warmup"])
    return options["steps"] * options["batch"] / run(options["steps"]), compile_seconds, ""


def handwritten_loop(options: dict[str, Any], k: int) -> tuple[Callable[[], None], Callable[[], None], float]:
    """(one step, a wait for the steps queued, the step's compile seconds) of the Flax + Optax loop on JAX's first
    ``k`` devices: the step does not wait for its loss unless ``options["sync_loss"]``."""
    import jax
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    x, y = synthetic_batch(options)
    mesh = Mesh(np.array(jax.devices("gpu" if options["gpu"] else "cpu")[:k]), ("batch",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    model, tx = flax_model(options["model"]), optax.sgd(options["lr"])
    nhwc, labels = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), y.astype(np.int32)
    variables = jax.jit(partial(model.init, train=False))(jax.random.PRNGKey(0), nhwc[:1])
    params, stats = jax.device_put((variables["params"], variables.get("batch_stats", {})), replicated)
    state = (params, stats, jax.device_put(tx.init(params), replicated))

    def step_fn(params, stats, opt_state, xb, yb):
        def loss_fn(p):
            logits, new = model.apply({"params": p, "batch_stats": stats}, xb, train=True, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean(), new["batch_stats"]
        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state, loss

    start = time.perf_counter()
    compiled = jax.jit(step_fn, donate_argnums=(0, 1, 2), out_shardings=replicated).lower(
        *state, jax.device_put(nhwc, sharded), jax.device_put(labels, sharded)).compile()
    compile_seconds = time.perf_counter() - start

    def step() -> None:
        nonlocal state
        *new, loss = compiled(*state, jax.device_put(nhwc, sharded), jax.device_put(labels, sharded))
        state = tuple(new)
        if options["sync_loss"]:
            float(loss)

    return step, lambda: jax.block_until_ready(state), compile_seconds


def keras_absent() -> str:
    """Why Keras 3 on JAX cannot be timed here ('' when it can), asked in a process of its own: Keras picks its
    backend when it loads."""
    from importlib import metadata

    try:
        version = metadata.version("keras")
    except metadata.PackageNotFoundError:
        return 'Keras is not installed: pip install -c constraints.txt -e "./backends/jax[keras]"'
    if not version.startswith("3."):
        return f"Keras {version}: need Keras 3"
    return ""


def keras_model(name: str, size: int):
    """The network ``name`` (resnet18, or mlp for a smoke run) in Keras layers, channels last."""
    if name == "resnet18":
        return keras_resnet18(size)
    import keras
    from keras import layers

    inputs = keras.Input((size, size, 1))
    z = layers.Flatten()(inputs)
    for width in (256, 256):
        z = layers.Dense(width, activation="relu")(z)
    return keras.Model(inputs, layers.Dense(10)(z))


def keras_resnet18(size: int):
    """The same ResNet-18 in Keras layers, channels last."""
    import keras
    from keras import layers

    def norm(z):
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(z)

    def block(z, width: int, stride: int):
        h = layers.Conv2D(width, 3, stride, padding="same", use_bias=False)(z)
        h = layers.ReLU()(norm(h))
        h = norm(layers.Conv2D(width, 3, padding="same", use_bias=False)(h))
        if stride != 1 or z.shape[-1] != width:
            z = layers.Conv2D(width, 1, stride)(z)
        return layers.ReLU()(layers.Add()([h, z]))

    inputs = keras.Input((size, size, 1))
    z = layers.ReLU()(norm(layers.Conv2D(64, 3, padding="same", use_bias=False)(inputs)))
    for stage, width in enumerate((64, 128, 256, 512)):
        z = block(block(z, width, 2 if stage else 1), width, 1)
    return keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(z)))


def time_keras(options: dict[str, Any], k: int) -> tuple[float, float, str]:
    """(samples/s, seconds to the first finished step) of Keras 3's DataParallel on the same job."""
    os.environ["KERAS_BACKEND"] = "jax"  # this process's own: it runs nothing else
    start_jax(options, k)
    import jax
    import keras

    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=jax.devices("gpu" if options["gpu"] else "cpu")[:k]))
    keras.utils.set_random_seed(0)
    model = keras_model(options["model"], options["size"])
    model.compile(optimizer=keras.optimizers.SGD(options["lr"]),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    x, y = synthetic_batch(options)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    start = time.perf_counter()
    model.train_on_batch(nhwc, y)  # compiles, then runs the first step
    first = time.perf_counter() - start
    for _ in range(options["warmup"] - 1):
        model.train_on_batch(nhwc, y)
    start = time.perf_counter()
    for _ in range(options["steps"]):
        model.train_on_batch(nhwc, y)
    return options["steps"] * len(x) / (time.perf_counter() - start), first, ""
