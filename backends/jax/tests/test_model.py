"""A user's own definition built by the JAX engine: float64 logits and gradients equal the NumPy truth.

The definition uses every kind of layer the model language has, in the
functional form, with nested scopes (dotted canonical names), residual blocks,
a channel Concat, LayerNorm on images and on features, a squeeze-and-excitation
gate (Mul), grouped, dilated, "same" and four-sided convolutions, padded and
ceil_mode pools, two Dropouts and a DropPath on images, whose masks come from
the core, on uneven and padded shards. Its token branch holds what the engine
keeps NHWC or turns to NCHW and back: images reshaped into tokens, a pre-norm
attention block with DropPath, attention written out with a Softmax off the
last axis, BatchNorm of tokens (channels L, the sample's first axis),
LayerNorm over an image's last three axes (gamma (C, H, W)), an image sliced,
transposed and multiplied by tokens, and a sample of four axes normalised,
through Dense and gated by a lower rank.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import multidev
from multidev import ModelSpec, MultidevError, load_backend, nn, reference, resolve_devices, shard_sizes
from multidev.nn.node import Node
from multidev.rules.dropout import multipliers
from multidev.rules.split import split
from multidev.testing import max_rel_error

CLASSES, BATCH = 5, 7


def tokens(h: Node) -> tuple[Node, Node]:
    """Images (12, 3, 3) through every token layer: the class token's features (12,), and a gated value (96,)."""
    t = nn.PositionEmbedding()(nn.ClassToken()(nn.Transpose((1, 0))(nn.Reshape((12, -1))(h))))  # (10, 12)
    t = nn.Residual(nn.LayerNorm(last=1), nn.MultiHeadAttention(3), nn.DropPath(0.5), name="block2")(t)
    keys = nn.Transpose((1, 0))(nn.Dense(4)(t))
    scores = nn.Softmax(0)(nn.Scale(0.5)(nn.MatMul()(nn.Dense(4, bias=False)(t), keys)))  # over the queries
    mixed = nn.BatchNorm()(nn.MatMul()(scores, t))                           # (10, 10) @ (10, 12), L's channels
    image = nn.Transpose((0, 2, 1))(nn.Slice(1, 0, None, 2)(nn.LayerNorm(last=3)(h)))  # (12, 3, 2)
    wide = nn.MatMul()(nn.Softmax(1)(image), nn.Slice(0, 1, 3)(mixed))       # (12, 3, 2) @ (2, 12): (12, 3, 12)
    deep = nn.Dense(4)(nn.LayerNorm(last=2, affine=False)(nn.Reshape((2, 6, 3, 12))(wide)))  # (2, 6, 3, 4)
    gate = nn.Sigmoid()(nn.Dense(4)(nn.Slice(0, 0, 3)(mixed)))               # (3, 4)
    return nn.Flatten()(nn.Slice(0, 0, 1)(mixed)), nn.Flatten()(nn.Mul()(deep, gate))


def grid(h: Node) -> Node:
    """Images (12, 3, 3) as a grid of tokens (3, 3, 12) through shifted windows (padded to 4x4, rolled by 1),
    padded, averaged over the rows, less and over values of their own: (36,)."""
    g = nn.WindowAttention(3, window=2, shift=1)(nn.Transpose((1, 2, 0))(h))
    rows = nn.Mean((0,))(nn.Pad(0, 0, 1, value=0.5)(g))                      # (3, 12)
    centred = nn.Sub()(rows, nn.Mean((-1,), keepdims=True)(rows))            # (3, 12) - (3, 1)
    return nn.Flatten()(nn.Div()(centred, nn.Sigmoid()(nn.Dense(12)(rows))))


def definition() -> nn.Model:
    x = nn.Input()
    h = nn.ReLU6()(nn.BatchNorm(eps=1e-3, momentum=0.01)(nn.Conv2d(8, 3, padding="same", bias=False)(x)))
    body = nn.Residual(nn.Conv2d(8, 3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(), nn.Conv2d(8, 3, padding=1),
                       nn.DropPath(0.5), name="block1")  # images' (n, 1, 1, 1) masks
    h = nn.ReLU()(nn.Sequential(body, name="stage1")(h))          # stage1.block1.conv1 ...
    squeezed = nn.SiLU()(nn.Conv2d(2, 1)(nn.GlobalAvgPool(keepdims=True)(h)))
    h = nn.Mul()(h, nn.HardSigmoid()(nn.Conv2d(8, 1)(squeezed)))  # squeeze-and-excitation: (8, 12, 12) * (8, 1, 1)
    depthwise = nn.Conv2d(8, 3, padding=2, dilation=2, groups=8)(h)
    h = nn.MaxPool2d(3, stride=2, padding=1)(depthwise)          # 12x12 -> 6x6
    wide = nn.GELU(approximate="tanh")(nn.Conv2d(4, 3, padding=(1, 1))(h))
    h = nn.HardSwish()(nn.LayerNorm(eps=1e-6)(nn.Concat()(nn.Conv2d(6, 1, groups=2)(h), wide)))  # 10 channels
    down = nn.Tanh()(nn.Conv2d(12, 3, stride=2, padding=(0, 1, 0, 1))(h))  # 6x6 -> 3x3
    h = nn.Add()(down, nn.LeakyReLU(0.2)(nn.Conv2d(12, 1, stride=2, name="proj")(h)))
    token, gated = tokens(h)
    windows = grid(h)
    h = nn.AvgPool2d(2, ceil_mode=True)(nn.Dropout(0.25)(h))      # 3x3 -> 2x2, the last windows half outside
    f = nn.Concat()(nn.Flatten()(h), nn.GlobalAvgPool()(h), token, gated, windows)  # 48 + 12 + 12 + 96 + 36
    f = nn.Dropout(0.5)(nn.Sigmoid()(nn.LayerNorm()(nn.GELU()(nn.Dense(16)(f)))))
    return nn.Model(x, nn.Dense()(f))


SPEC = ModelSpec("mine", (3, 12, 12), CLASSES, definition().graph())


@pytest.fixture(scope="module")
def engine():
    return load_backend("jax")


def make(engine, k: int, batchnorm: str = "local", dtype: str = "float64"):
    devices = resolve_devices(devices=k, max_cpu=engine.max_cpu_devices())
    return multidev.replicate(engine, multidev.Setup(SPEC, devices, batchnorm=batchnorm, dtype=dtype), STATE)


def _state() -> dict[str, np.ndarray]:
    """The seed's weights, with running statistics and norm scales moved off their initial 0 and 1."""
    rng = np.random.default_rng(1)
    state = SPEC.init(0)
    for p in SPEC.params():
        if p.role in ("mean", "gamma", "beta"):
            state[p.name] = rng.normal(0.0, 0.5, p.shape).astype(np.float32) + (p.role == "gamma")
        elif p.role == "var":
            state[p.name] = rng.uniform(0.5, 2.0, p.shape).astype(np.float32)
    return state


STATE = _state()
RNG = np.random.default_rng(2)
X, Y = RNG.normal(0, 1, (BATCH, *SPEC.in_shape)), RNG.integers(0, CLASSES, BATCH)


def masks(dtype=np.float64) -> dict[str, np.ndarray]:
    """The whole batch's Dropout multipliers, as the core draws them."""
    return {node: multipliers(0, 0, 0, node, p, shape, np.arange(BATCH), dtype) for node, p, shape in SPEC.dropouts()}


def training(sizes, dtype=np.float64) -> multidev.Shards:
    """The batch cut by ``sizes``, each device's rows of the masks with it (as the core's loop hands them)."""
    whole = masks(dtype)
    return replace(multidev.cut(X, Y, sizes), masks={node: tuple(split(m, sizes)) for node, m in whole.items()})


def test_the_definition_uses_every_layer():
    kinds = {type(node.layer).__name__ for node in SPEC.graph.nodes}
    assert kinds == set(nn.layers.LAYERS), set(nn.layers.LAYERS) - kinds
    assert "stage1.block1.conv1.weight" in SPEC.trainable() and len(SPEC.dropouts()) == 4


def test_state_round_trips_exactly(engine):
    state = make(engine, 1).state()
    assert all(np.array_equal(state[name], STATE[name]) for name in STATE)


def test_logits_are_the_float64_truth(engine):
    reps = make(engine, 2)
    got = reps.predict(reps.place(multidev.cut(X, None, shard_sizes(BATCH, 2))))
    assert max_rel_error(got, reference.predict(SPEC, STATE, X)) < 1e-10


# the kit's LayerChecks hold every layer alone and random graphs to the truth on every count in the quick suite;
# this whole-language network's further counts and its step compile for 5 s each: the slow run takes them
@pytest.mark.parametrize("k, batchnorm", [(2, "local"), pytest.param(1, "local", marks=pytest.mark.slow),
                                          pytest.param(3, "sync", marks=pytest.mark.slow)])
def test_gradients_are_the_float64_truth(engine, k, batchnorm):
    sizes = shard_sizes(BATCH, k)  # 7 rows: padded to 8 on one device, uneven on 2 and 3
    reps = make(engine, k, batchnorm)
    got = reps.gradients(reps.place(training(sizes)))
    want = reference.gradients(SPEC, STATE, X, Y, sizes, batchnorm, masks=masks())
    errors = {name: max_rel_error(got[name], want[name]) for name in SPEC.trainable()}
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-9, f"{worst} differs by {errors[worst]:.2e} on {k} device(s), cut {sizes}"


@pytest.mark.slow
def test_a_training_step_is_the_float64_truth(engine):
    sizes = shard_sizes(BATCH, 2)
    reps = make(engine, 2)
    reps.train_step(reps.place(training(sizes)), lr=0.1)
    want = reference.sgd_step(SPEC, STATE, X, Y, 0.1, sizes, masks=masks())
    got = reps.state()
    errors = {name: max_rel_error(got[name], want[name]) for name in want}
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-9, f"{worst} differs by {errors[worst]:.2e}"


def test_training_without_the_cores_masks_is_one_line(engine):
    reps = make(engine, 2, dtype="float32")
    batch = reps.place(multidev.cut(X, Y, shard_sizes(BATCH, 2)))
    for step in (lambda: reps.train_step(batch, lr=0.1), lambda: reps.gradients(batch)):
        with pytest.raises(MultidevError, match="no Dropout masks") as caught:
            step()
        assert "\n" not in str(caught.value)


def scopes() -> nn.Model:
    """Layers named as the scopes of others, as ONNX imports torchvision's ViT (``encoder`` is its PositionEmbedding
    and holds its blocks): Flax makes one module per name, so such a layer's arrays sit in its scope's module."""
    x = nn.Input()
    t = nn.Transpose((1, 0))(nn.Reshape((4, -1))(nn.Conv2d(4, 2, stride=2)(x)))
    t = nn.PositionEmbedding(name="encoder")(nn.ClassToken(name="cls")(t))
    t = nn.Dense(4, name="encoder.layers")(nn.LayerNorm(last=1, name="encoder.ln")(t))
    t = nn.MultiHeadAttention(2, name="encoder.layers.attn")(nn.Dense(4, name="encoder.layers.fc")(t))
    return nn.Model(x, nn.Dense(name="head")(nn.Flatten()(t)))


def test_layers_named_as_scopes_hold_their_arrays_and_equal_the_truth(engine):
    spec = ModelSpec("scopes", (2, 6, 6), 3, scopes().graph())
    rng = np.random.default_rng(3)
    state = {p.name: rng.normal(0, 0.5, p.shape).astype(np.float32) for p in spec.params()}
    x, y = rng.normal(0, 1, (5, *spec.in_shape)), rng.integers(0, 3, 5)
    devices = resolve_devices(devices=2, max_cpu=engine.max_cpu_devices())
    reps = multidev.replicate(engine, multidev.Setup(spec, devices, "local", "float64"), state)
    assert all(np.array_equal(reps.state()[name], state[name]) for name in state)
    sizes = shard_sizes(5, 2)
    logits = reps.predict(reps.place(multidev.cut(x, None, sizes)))
    assert max_rel_error(logits, reference.predict(spec, state, x)) < 1e-10
    got, want = reps.gradients(reps.place(multidev.cut(x, y, sizes))), reference.gradients(spec, state, x, y, sizes)
    assert max(max_rel_error(got[name], want[name]) for name in want) < 1e-9
