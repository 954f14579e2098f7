"""The engine's sharded levels give the replicated run's bits, and level ``parameters`` really releases the whole.

The kit (multidev/testing/sharding.py) holds every engine to float64 within a
tolerance; this engine sums the rows in its kvstore's order and updates them
with the same kernels, so it is held to equal bits here, on 3 and 4 devices
(uneven and empty shards), and in float32 with sync BatchNorm; the kit
holds it to them on 2 devices and over 2 processes (``shard_rtol = 0``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import multidev
from multidev import nn
from multidev.engines.protocol import Setup, replicate
from multidev.rules.devices import resolve_devices
from multidev.rules.models import ModelSpec
from multidev.rules.optimizers import Optimizer
from multidev.rules.sharding import owned_rows
from multidev.rules.split import cut, shard_sizes
from multidev.testing import LENET, batch

#: a convolution of 3 channels, BatchNorm and a head: on 4 devices the last owns none of its rows
TINY_BN = ModelSpec("tiny-bn", (1, 6, 6), 4, nn.Sequential(nn.Conv2d(3, 3, padding=1), nn.BatchNorm(), nn.ReLU(),
                                                           nn.Flatten(), nn.Dense()).graph())
ADAMW = Optimizer("adamw", betas=(0.8, 0.99), eps=1e-3, weight_decay=0.1)
NESTEROV = Optimizer(momentum=0.9, nesterov=True, weight_decay=0.05)


def train(spec: ModelSpec, k: int, shard: str, optimizer: Optimizer, accumulate: int = 1, **setup):
    """Two updates of 11 rows at changing rates (micro-batches of 6 and 5 where ``accumulate`` is 2)."""
    engine = multidev.load_backend("mxnet")
    devices = resolve_devices(devices=k, gpu_count=0, max_cpu=None)
    reps = replicate(engine, Setup(spec, tuple(devices), optimizer=optimizer, accumulate=accumulate, shard=shard,
                                   **setup), spec.init(0))
    for step, lr in enumerate((0.1, 0.05)):
        x, y = batch(spec, 11, seed=70 + step)
        cuts = ((0, 6), (6, 11)) if accumulate == 2 else ((0, 11),)
        for a, b in cuts:
            placed = reps.place(replace(cut(x[a:b], y[a:b], shard_sizes(b - a, k)), whole=len(x)))
            reps.train_step(placed, lr=lr) if b == 11 else reps.accumulate(placed)
    return reps


def assert_same_bits(sharded, whole) -> None:
    for got, want in ((sharded.state(), whole.state()), (sharded.optimizer_state(), whole.optimizer_state())):
        assert sorted(got) == sorted(want)
        different = [name for name in want if not np.array_equal(got[name], want[name])]
        assert not different, f"not the replicated run's bits: {different[:3]}"


@pytest.mark.parametrize("level", ["optimizer", "gradients", "parameters"])
def test_lenet_adamw_float64_bits_on_3_devices(level):
    assert_same_bits(train(LENET, 3, level, ADAMW, dtype="float64"), train(LENET, 3, "none", ADAMW, dtype="float64"))


def test_lenet_adamw_float32_bits_on_4_devices():
    """float32 AdamW is MXNet's fused kernel over several weights a call: the sharded levels group each device's rows
    (updated where the first context's whole lies: CPU contexts share memory) where the replicated run's kvstore
    updates one whole weight a call, and still give its bits; each device's state stays on its context."""
    whole = train(LENET, 4, "none", ADAMW)
    for level in ("optimizer", "parameters"):
        sharded = train(LENET, 4, level, ADAMW)
        assert_same_bits(sharded, whole)
        for ctx, updater in zip(sharded.contexts, sharded._shard.updaters):  # each device's state on its own
            assert {slot.context for state in updater.states.values() for slot in state} == {ctx}


def test_empty_shards_accumulation_nesterov_float64_bits_on_4_devices():
    whole = train(TINY_BN, 4, "none", NESTEROV, accumulate=2, dtype="float64")
    for level in ("optimizer", "parameters"):
        assert_same_bits(train(TINY_BN, 4, level, NESTEROV, accumulate=2, dtype="float64"), whole)


def test_sync_batchnorm_float32_bits():
    whole = train(TINY_BN, 2, "none", ADAMW, accumulate=2, batchnorm="sync")
    assert_same_bits(train(TINY_BN, 2, "parameters", ADAMW, accumulate=2, batchnorm="sync"), whole)


def test_parameters_level_holds_only_its_rows_between_steps():
    """Each Parameter's array on a context is that device's rows (none where it owns none), its gradient gone;
    a step, an evaluation and the whole gradient still see the whole."""
    reps = train(TINY_BN, 4, "parameters", ADAMW, dtype="float64")
    x, y = batch(TINY_BN, 11, seed=9)
    placed = reps.place(cut(x, y, shard_sizes(len(x), 4)))
    want = train(TINY_BN, 4, "none", ADAMW, dtype="float64")
    want_placed = want.place(cut(x, y, shard_sizes(len(x), 4)))
    assert reps.evaluate(placed) == want.evaluate(want_placed)
    got, expected = reps.gradients(placed), want.gradients(want_placed)
    assert all(np.array_equal(got[name], expected[name]) for name in expected)
    for param in reps._trainable:
        assert param._grad is None
        for arr, (a, b) in zip(param._data, owned_rows(param.shape[0], 4)):
            assert (arr is None) if a == b else arr.shape == (b - a, *param.shape[1:])
    assert reps.held_bytes()[3]["parameters"] < reps.held_bytes()[0]["parameters"]
