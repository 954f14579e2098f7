"""MXNet and PyTorch agree: same canonical weights and batch, same logits, loss and SGD step.

The PyTorch engine is the project's reference. Run this file as a script to
print the measured errors: ``python backends/mxnet/tests/test_parity_torch.py``.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from multidev import load_backend, shard_sizes
from multidev.devices import resolve_devices
from multidev.models import ModelSpec
from multidev.registry import installed
from multidev.testing import CROSS_ENGINE_RTOL
from multidev.testing._helpers import LENET, RESNET, batch, max_rel_error

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None or "torch" not in installed(),
                                reason="needs PyTorch and the multidev torch engine "
                                       "(pip install -c constraints.txt -e ./backends/torch)")

SPECS = {"lenet": LENET, "resnet18": RESNET}


def _replicas(engine: str, spec: ModelSpec, k: int, batchnorm: str):
    backend = load_backend(engine)
    return backend.replicate(spec, spec.init(7), resolve_devices(devices=k), batchnorm=batchnorm)


def measure(spec: ModelSpec, k: int = 2, size: int = 9, lr: float = 0.1) -> dict[str, float]:
    """Relative errors between the engines: inference logits and loss, training loss, state after one step.

    Two devices with sync BatchNorm and uneven shards (5 and 4 samples).
    """
    x, y = batch(spec, size, seed=21)
    sizes = shard_sizes(size, k)
    out: dict[str, dict] = {}
    for engine in ("mxnet", "torch"):
        reps = _replicas(engine, spec, k, "sync")
        data = reps.split_batch(x, y, sizes)
        logits = reps.predict(reps.split_batch(x, None, sizes))
        eval_loss = reps.evaluate(data).loss_sum
        train_loss = reps.train_step(data, lr).loss_sum
        out[engine] = {"logits": logits, "eval_loss": eval_loss, "train_loss": train_loss, "state": reps.state()}
    mx_, pt = out["mxnet"], out["torch"]
    return {
        "logits": max_rel_error(mx_["logits"], pt["logits"]),
        "eval_loss": abs(mx_["eval_loss"] - pt["eval_loss"]) / abs(pt["eval_loss"]),
        "train_loss": abs(mx_["train_loss"] - pt["train_loss"]) / abs(pt["train_loss"]),
        "state": max(max_rel_error(mx_["state"][n], pt["state"][n]) for n in spec.trainable()),
        "statistics": max((max_rel_error(mx_["state"][n], pt["state"][n]) for n in spec.statistics()),
                          default=0.0),
    }


@pytest.mark.parametrize("name", sorted(SPECS))
def test_same_logits_loss_and_step_as_torch(name):
    errors = measure(SPECS[name])
    for what, err in errors.items():
        assert err <= CROSS_ENGINE_RTOL, (f"parity: {name} {what} differs from PyTorch by {err:.1e} (relative), "
                                          f"tolerance {CROSS_ENGINE_RTOL:.0e}")


if __name__ == "__main__":
    for name, spec in sorted(SPECS.items()):
        print(name, {k: f"{v:.1e}" for k, v in measure(spec).items()})
