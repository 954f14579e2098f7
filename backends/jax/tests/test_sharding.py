"""The JAX engine's sharded runs: the replicated run's very bits in float64, and each device's rows held."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

import multidev
from multidev import ModelSpec, load_backend, resolve_devices, shard_sizes
from multidev.engine import Optimizer, padded_rows
from multidev.rules.split import cut
from multidev.testing import batch

#: a small LeNet whose first convolution's 6 output channels leave the 4th of 4 devices none (an empty shard)
SPEC = ModelSpec("lenet", (1, 16, 16), 10)
SGD = Optimizer(momentum=0.9, nesterov=True, weight_decay=0.05)


@lru_cache(maxsize=None)
def trained(k: int, shard: str, optimizer: Optimizer) -> tuple[dict, dict, list]:
    """State, optimizer state and held bytes after two float64 updates on k devices of 11 rows (uneven shards)."""
    engine = load_backend("jax")
    devices = resolve_devices(devices=k, max_cpu=engine.max_cpu_devices())
    reps = multidev.replicate(engine, multidev.Setup(SPEC, devices, dtype="float64", optimizer=optimizer,
                                                     shard=shard), SPEC.init(0))
    for step, lr in enumerate((0.1, 0.05)):
        x, y = batch(SPEC, 11, seed=70 + step)
        reps.train_step(reps.place(cut(x, y, shard_sizes(len(x), k))), lr=lr)
    return reps.state(), reps.optimizer_state(), reps.held_bytes()


@pytest.mark.parametrize("shard, k, optimizer", [  # AdamW on 2 devices at every level: the kit's LeNet case
    pytest.param(shard, 4, SGD, marks=() if shard == "parameters" else pytest.mark.slow)
    for shard in ("optimizer", "gradients", "parameters")])
def test_sharded_run_is_the_replicated_run_bit_for_bit(shard, k, optimizer):
    """Row-wise updates and sums of two (k = 2) or of the same order (a psum_scatter's): the same bits."""
    got, want = trained(k, shard, optimizer), trained(k, "none", optimizer)
    for ours, theirs in zip(got[:2], want[:2]):
        assert sorted(ours) == sorted(theirs)
        different = [name for name in theirs if not np.array_equal(ours[name], theirs[name])]
        assert not different, f"--shard {shard} on {k} devices differs from the replicated run in {different}"


def test_each_device_holds_its_padded_rows_and_an_empty_shard_holds_padding():
    """4 devices at --shard parameters: every device holds ceil(n / 4) rows of each parameter and slot (the 6
    output channels of conv1: 2, 2, 2 and padding), the replicated run the whole on each."""
    rows = {p.name: p.shape for p in SPEC.params() if p.trainable}
    share = sum(padded_rows(s[0], 4) * int(np.prod(s[1:])) * 8 for s in rows.values())
    whole = sum(int(np.prod(s)) * 8 for s in rows.values())
    assert trained(4, "parameters", SGD)[2] == [{"parameters": share, "optimizer": share}] * 4
    assert trained(4, "none", SGD)[2] == [{"parameters": whole, "optimizer": whole}] * 4
