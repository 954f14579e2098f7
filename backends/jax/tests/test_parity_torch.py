"""JAX and PyTorch give the same numbers from the same canonical weights and batch.

Tolerance: ``CROSS_ENGINE_RTOL`` (1e-3, relative to each array's scale), the
project's cross-engine promise. The two frameworks sum float32 in different
orders (XLA's and oneDNN's convolutions differ by ~1e-6), so the engines
agree to about 1e-5 here (measured: logits 8e-7, parameters 4e-6, the update
itself 2e-5); a much larger gap means a layout or convention bug.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidev import ModelSpec, resolve_devices, shard_sizes
from multidev.registry import installed, load_backend
from multidev.testing import CROSS_ENGINE_RTOL
from multidev.testing._helpers import LENET, RESNET, assert_states_close, batch, max_rel_error

pytest.importorskip("torch", reason="PyTorch is not installed: no engine to compare with")
if "torch" not in installed():
    pytest.skip("the torch engine is not installed: pip install -c constraints.txt ./backends/torch",
                allow_module_level=True)

# The kit's shapes, so the executables it compiled are reused (the batches are 8 rows per device, aligned).
SPECS = [pytest.param(LENET, id="lenet"), pytest.param(RESNET, id="resnet18")]


def replicas(engine: str, spec: ModelSpec, k: int, batchnorm: str = "local"):
    backend = load_backend(engine)
    devices = resolve_devices(devices=k, max_cpu=backend.max_cpu_devices())
    return backend.replicate(spec, spec.init(0), devices, batchnorm=batchnorm)


def errors(got: dict, want: dict) -> dict[str, float]:
    return {name: max_rel_error(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
            for name in want}


@pytest.mark.parametrize("spec", SPECS)
def test_same_logits_and_loss(spec):
    x, y = batch(spec, 8, seed=21)
    out = {}
    for engine in ("jax", "torch"):
        reps = replicas(engine, spec, 1)
        logits = reps.predict(reps.split_batch(x, None, [8]))  # inference mode
        loss = reps.train_step(reps.split_batch(x, y, [8]), lr=0.1).loss_sum  # training mode
        out[engine] = logits, loss
    err = max_rel_error(out["jax"][0], out["torch"][0])
    assert err <= CROSS_ENGINE_RTOL, f"parity: {spec.name} logits differ by {err:.1e} (relative)"
    loss_err = abs(out["jax"][1] - out["torch"][1]) / abs(out["torch"][1])
    assert loss_err <= CROSS_ENGINE_RTOL, f"parity: {spec.name} training loss differs by {loss_err:.1e} (relative)"


@pytest.mark.parametrize("spec", SPECS)
def test_same_parameters_after_sync_step_on_two_devices(spec):
    x, y = batch(spec, 9, seed=22)  # uneven shards: 5 and 4
    states = {}
    for engine in ("jax", "torch"):
        reps = replicas(engine, spec, 2, batchnorm="sync")
        reps.train_step(reps.split_batch(x, y, shard_sizes(9, 2)), lr=0.1)
        states[engine] = reps.state()
    assert_states_close(states["jax"], states["torch"], rtol=CROSS_ENGINE_RTOL,
                        promise=f"parity: {spec.name} after one sync-BatchNorm SGD step on 2 devices")
    # The parameters hide small updates; the updates themselves (-lr * gradient, statistics' moves) must agree too.
    start = spec.init(0)
    moves = {e: {n: states[e][n] - start[n] for n in start} for e in states}
    assert_states_close(moves["jax"], moves["torch"], rtol=CROSS_ENGINE_RTOL,
                        promise=f"parity: {spec.name} update of one sync-BatchNorm SGD step on 2 devices")
