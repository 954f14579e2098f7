"""A user's definition built by the torch engine: canonical names, and float64 logits and gradients equal to the
reference's for a graph with residual blocks, max pooling, LayerNorm, GELU, Concat and Dropout."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import multidev
from multidev import nn, reference
from multidev.engine import STEP, Optimizer
from multidev.rules.dropout import shard_masks
from multidev.testing import FLOAT64_RTOL, batch
from multidev.testing import assert_states_close
from multidev_torch.model import build


def definition() -> nn.Model:
    """Two branches joined by Concat after two residual blocks (one with a projection); Dropout on images and on
    features."""
    x = nn.Input()
    h = nn.Conv2d(6, 3, padding=1)(x)
    h = nn.Residual(nn.Conv2d(6, 3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(),
                    nn.Conv2d(6, 3, padding=1), name="block1")(h)
    h = nn.ReLU()(h)
    h = nn.Residual(nn.Conv2d(8, 3, stride=2, padding=1), nn.LayerNorm(), nn.GELU(),
                    shortcut=nn.Conv2d(8, 1, stride=2, name="proj"), name="block2")(h)
    pooled = nn.MaxPool2d(2)(h)
    other = nn.Sequential(nn.Conv2d(4, 3, padding=1), nn.Tanh(), nn.AvgPool2d(3, stride=2), name="side")(h)
    h = nn.Dropout(0.3)(nn.Concat()(pooled, other))
    h = nn.Sigmoid()(nn.LayerNorm()(nn.Dense(16)(nn.Flatten()(h))))
    return nn.Model(x, nn.Dense()(nn.Dropout(0.5)(h)))


SPEC = multidev.ModelSpec("user", (2, 10, 10), 5, graph=definition().graph())
SIZES = (4, 3)  # uneven shards on two devices


def replicas(batchnorm: str = "local", k: int = 2):
    devices = multidev.resolve_devices(devices=k)
    setup = multidev.Setup(SPEC, tuple(devices), batchnorm, "float64")
    return multidev.replicate(multidev.load_backend("torch"), setup, SPEC.init(3))


def masks(sizes, dtype=np.float64):
    return shard_masks(SPEC.dropouts(), seed=1, epoch=0, update=2, first=0, sizes=sizes, dtype=dtype)


def test_module_paths_are_the_canonical_names():
    assert list(build(SPEC).state_dict()) == [p.name for p in SPEC.params()]
    assert "block2.proj.weight" in SPEC.trainable() and "side.conv1.bias" in SPEC.trainable()


def test_float64_logits_equal_the_reference():
    x, _ = batch(SPEC, sum(SIZES))
    reps = replicas()
    got = reps.predict(reps.place(multidev.cut(x, None, SIZES)))
    want = reference.predict(SPEC, SPEC.init(3), x)
    assert_states_close({"logits": got}, {"logits": want}, rtol=FLOAT64_RTOL,
                        promise="inference logits of the user's definition (Dropout the identity)")


@pytest.mark.parametrize("batchnorm", ["local", "sync"])
def test_float64_gradients_with_dropout_equal_the_reference(batchnorm):
    x, y = batch(SPEC, sum(SIZES))
    per_device = masks(SIZES)
    whole = {node: np.concatenate(parts) for node, parts in per_device.items()}
    assert all(0 < (m == 0).mean() < 1 for m in whole.values()), "the masks drop some values and keep others"
    reps = replicas(batchnorm)
    got = reps.gradients(reps.place(dataclasses.replace(multidev.cut(x, y, SIZES), masks=per_device)))
    want = reference.gradients(SPEC, SPEC.init(3), x, y, SIZES, batchnorm, masks=whole)
    assert_states_close(got, want, rtol=FLOAT64_RTOL,
                        promise=f"gradient of the user's definition with Dropout ({batchnorm} BatchNorm, {SIZES})")


def test_dropout_model_trained_without_masks_is_one_line():
    x, y = batch(SPEC, sum(SIZES))
    reps = replicas()
    placed = reps.place(multidev.cut(x, y, SIZES))
    for run in (lambda: reps.train_step(placed, lr=0.1), lambda: reps.gradients(placed)):
        with pytest.raises(multidev.MultidevError, match="masks") as err:
            run()
        assert "\n" not in str(err.value) and "shard_masks" in str(err.value)


def test_a_definition_without_parameters_accumulates_and_resumes():
    """Nothing to train: micro-batches, an AdamW update and its state round trip without a torch optimizer (torch's
    refuses an empty parameter list); the update count still moves, as a checkpoint needs."""
    spec = multidev.ModelSpec("ops", (2, 6, 6), 2, graph=nn.Sequential(nn.MaxPool2d(3, padding="same"), nn.ReLU(),
                                                                        nn.GlobalAvgPool()).graph())
    setup = multidev.Setup(spec, tuple(multidev.resolve_devices(devices=2)), "local", "float32",
                           optimizer=Optimizer("adamw"), accumulate=2)
    reps = multidev.replicate(multidev.load_backend("torch"), setup, {})
    x, y = batch(spec, 7)
    placed = reps.place(multidev.cut(x, y, SIZES))
    first, second = reps.accumulate(placed), reps.train_step(placed, lr=0.1)
    assert first.count == second.count == 7 and first.loss_sum == pytest.approx(second.loss_sum)
    assert reps.state() == {} and reps.gradients(placed) == {}
    saved = reps.optimizer_state()
    assert list(saved) == [STEP] and int(saved[STEP]) == 1
    again = multidev.replicate(multidev.load_backend("torch"), setup, {})
    again.load_optimizer_state(saved)
    assert int(again.optimizer_state()[STEP]) == 1
