"""The hand-written Flax + Optax loop of the model table: what a JAX user writes for data parallelism without
multidev, as ``bench.jax_peers`` writes it for ResNet-18: one jitted step, the batch sharded over a mesh of the
``k`` CPU devices, the parameters replicated (XLA partitions it; BatchNorm sees the whole batch), SGD with momentum.
The step does not wait for its loss; the timing waits for the parameters at the ends of each window."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from bench.jax_peers import start_jax
from bench.peers.measure import checked, compute_device, measure, nhwc, synthetic
from bench.peers.nets import Net


def time_flax(name: str, size: int, smoke: bool, k: int, batch: int, lr: float, momentum: float, warmup: int,
              steps: int, repeats: int, expected: int, gpu: bool = False) -> dict[str, Any]:
    """Samples/s, first step and parameter count of the Flax network ``name`` on ``k`` CPU devices (GPUs where
    ``gpu``; a fresh process)."""
    start_jax({"gpu": gpu}, k)  # exactly k devices, as its user sets them before JAX starts
    import jax
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from bench.peers import flax_models

    model, tx = flax_models.build(Net.of(name, size, smoke)), optax.sgd(lr, momentum)
    x, y = synthetic(batch, size)
    mesh = Mesh(np.array(jax.devices(compute_device(gpu))[:k]), ("batch",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    images, labels = nhwc(x), y.astype(np.int32)
    variables = jax.jit(partial(model.init, train=False))(jax.random.PRNGKey(0), images[:1])
    count = sum(int(np.prod(v.shape)) for v in jax.tree_util.tree_leaves(variables["params"]))
    state = jax.device_put((variables["params"], variables.get("batch_stats", {}), tx.init(variables["params"]),
                            jax.random.PRNGKey(1)), replicated)
    update = jax.jit(partial(train_step, model, tx), donate_argnums=(0,), out_shardings=replicated)
    held = [state]

    def step() -> None:
        held[0], _ = update(held[0], jax.device_put(images, sharded), jax.device_put(labels, sharded))

    timed = measure(step, lambda: jax.block_until_ready(held[0]), batch=batch, warmup=warmup, steps=steps,
                    repeats=repeats)
    return {**timed, "params": checked(count, expected, "the Flax network"), "version": jax.__version__}


def train_step(model: Any, tx: Any, state: tuple, images: Any, labels: Any) -> tuple[tuple, Any]:
    """One SGD step on the whole (sharded) batch: mean cross-entropy, BatchNorm's statistics updated, a fresh
    Dropout key split off the carried one."""
    import jax
    import optax

    params, stats, opt_state, key = state
    key, dropout = jax.random.split(key)

    def loss_fn(p: Any) -> tuple[Any, Any]:
        logits, new = model.apply({"params": p, "batch_stats": stats}, images, train=True, mutable=["batch_stats"],
                                  rngs={"dropout": dropout})
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), new.get("batch_stats", {})

    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), stats, opt_state, key), loss
