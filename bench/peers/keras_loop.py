"""Keras 3 on the JAX backend, the model table's other JAX contender, as ``bench.jax_peers.time_keras`` runs it:
``keras.distribution.DataParallel`` over exactly ``k`` CPU devices, ``compile(jit_compile=True)``, ``train_on_batch``
(which reads its loss back every step), SGD with momentum."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bench.jax_peers import start_jax
from bench.peers.measure import checked, compute_device, measure, nhwc, synthetic
from bench.peers.nets import Net


def time_keras(name: str, size: int, smoke: bool, k: int, batch: int, lr: float, momentum: float, warmup: int,
               steps: int, repeats: int, expected: int, gpu: bool = False) -> dict[str, Any]:
    """Samples/s, first step and parameter count of Keras' network ``name`` on ``k`` CPU devices (GPUs where
    ``gpu``; a fresh process)."""
    os.environ["KERAS_BACKEND"] = "jax"  # this process's own: it runs nothing else
    start_jax({"gpu": gpu}, k)
    import jax
    import keras

    from bench.peers import keras_models

    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices(compute_device(gpu))[:k]))
    keras.utils.set_random_seed(0)
    model = keras_models.build(Net.of(name, size, smoke))
    model.compile(optimizer=keras.optimizers.SGD(lr, momentum=momentum),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    x, y = synthetic(batch, size)
    images = nhwc(x)
    count = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    timed = measure(lambda: model.train_on_batch(images, y), lambda: None, batch=batch, warmup=warmup, steps=steps,
                    repeats=repeats)
    return {**timed, "params": checked(count, expected, "the Keras network"), "version": keras.__version__}
