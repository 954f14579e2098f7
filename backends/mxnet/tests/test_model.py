"""Any definition of the model language, built from Gluon's layers, against the float64 reference.

One definition holds every layer kind the zoo's networks do not exercise
together: residual blocks (with and without a projection), max and average
pooling, LayerNorm on images and on features, GELU, Tanh, Sigmoid, Concat,
BatchNorm on features and Dropout on images and on features. Another holds
the layers of any rank the kit's token cases leave out.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import multidev
from multidev import nn, reference
from multidev.rules.devices import resolve_devices
from multidev.rules.dropout import shard_masks
from multidev.rules.models import ModelSpec
from multidev.testing import CROSS_ENGINE_RTOL, FLOAT64_RTOL, assert_states_close
from multidev.testing.recipes import BF16_STEP_RTOL

SIZES = [3, 2]  # uneven shards on two contexts
SIZES_OF_7 = [4, 3]


def definition() -> nn.Model:
    x = nn.Input()
    h = nn.Sequential(nn.Conv2d(8, 3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(), name="stem")(x)
    h = nn.Residual(nn.Conv2d(8, 3, padding=1), nn.LayerNorm(), nn.GELU(), nn.Conv2d(8, 3, padding=1),
                    name="block1")(h)
    h = nn.MaxPool2d(2)(h)
    wide, narrow = nn.Conv2d(6, 3, padding=1)(h), nn.Tanh()(nn.Conv2d(4, 1)(h))
    h = nn.Dropout(0.25)(nn.Concat()(wide, narrow))
    h = nn.Residual(nn.Conv2d(12, 3, stride=2, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(),
                    shortcut=nn.Conv2d(12, 1, stride=2), name="block2")(h)
    h = nn.AvgPool2d(3, stride=1)(nn.ReLU()(h))
    h = nn.Dense(16, bias=False)(nn.Flatten()(h))  # a bias before BatchNorm has a gradient of exactly 0
    h = nn.Sigmoid()(nn.LayerNorm()(nn.BatchNorm()(h)))
    return nn.Model(x, nn.Dense()(nn.Dropout(0.5)(h)))


SPEC = ModelSpec("mixed", (3, 12, 12), 5, graph=definition().graph())


def state(seed: int = 0) -> dict:
    """The seed's weights with every scale, shift and running statistic moved off its initial value."""
    rng = np.random.default_rng(seed)
    start = SPEC.init(seed)
    moved = {name: value + rng.normal(0, 0.2, value.shape) for name, value in start.items()}
    for name in SPEC.statistics():
        if name.endswith("running_var"):
            moved[name] = rng.uniform(0.5, 2.0, start[name].shape)
    return {name: value.astype(np.float32) for name, value in moved.items()}


def data(rows: int = sum(SIZES), seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(0, 1, (rows, *SPEC.in_shape)), rng.integers(0, SPEC.num_classes, rows)


def shards(x, y, masks=True, dtype=np.float64) -> multidev.Shards:
    """The batch cut over two contexts, with the core's Dropout multipliers in the run's dtype."""
    cut = multidev.cut(x, y, SIZES)
    if not masks:
        return cut
    return dataclasses.replace(cut, masks=shard_masks(SPEC.dropouts(), 0, 0, 0, 0, SIZES, dtype))


def whole_masks() -> dict:
    per_device = shard_masks(SPEC.dropouts(), 0, 0, 0, 0, SIZES, np.float64)
    return {name: np.concatenate(parts) for name, parts in per_device.items()}


def flat(state: dict) -> np.ndarray:
    return np.concatenate([state[name].ravel() for name in SPEC.trainable()])


@pytest.fixture(scope="module")
def engine():
    return multidev.load_backend("mxnet")


def replicas(engine, dtype: str = "float64", devices: int = 2, batchnorm: str = "local"):
    setup = multidev.Setup(SPEC, resolve_devices(devices=devices), batchnorm, dtype)
    return multidev.replicate(engine, setup, state())


def test_the_network_holds_exactly_the_canonical_arrays(engine):
    reps = replicas(engine, "float32", 1)
    assert list(reps.state()) == [p.name for p in SPEC.params()]
    assert_states_close(reps.state(), state(), rtol=0, promise="load_state then state() is not a copy")


def test_float64_logits_match_the_reference(engine):
    x, _ = data()
    got = replicas(engine).predict(replicas(engine).place(multidev.cut(x, None, SIZES)))
    want = reference.predict(SPEC, state(), x)
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert err <= FLOAT64_RTOL, f"float64 logits differ from the reference by {err:.2e} (relative)"


def test_float64_gradients_with_dropout_match_the_reference(engine):
    x, y = data()
    reps = replicas(engine)
    got = reps.gradients(reps.place(shards(x, y)))
    want = reference.gradients(SPEC, state(), x, y, SIZES, masks=whole_masks())
    assert_states_close(got, want, rtol=FLOAT64_RTOL, promise="float64 gradients of the definition")


def test_float64_step_with_dropout_matches_the_reference(engine):
    x, y = data()
    reps = replicas(engine)
    reps.train_step(reps.place(shards(x, y)), lr=0.1)
    want = reference.sgd_step(SPEC, state(), x, y, 0.1, SIZES, masks=whole_masks())
    assert_states_close(reps.state(), want, rtol=FLOAT64_RTOL, promise="a float64 SGD step of the definition")


def test_sync_batchnorm_gradients_with_dropout(engine):
    """Sync BatchNorm runs the network uncompiled, a thread per context: the masks must reach each one."""
    x, y = data()
    reps = replicas(engine, "float32", batchnorm="sync")
    got = reps.gradients(reps.place(shards(x, y, dtype=np.float32)))
    want = reference.gradients(SPEC, state(), x, y, SIZES, batchnorm="sync", masks=whole_masks())
    assert_states_close(got, want, rtol=CROSS_ENGINE_RTOL, promise="float32 sync BatchNorm gradients")


def test_bf16_gradients_with_dropout(bf16):
    """contrib.amp's bfloat16 graph takes the masks as data too (seed weights: the moved ones amplify bf16's error)."""
    x, y = data()
    setup = multidev.Setup(SPEC, resolve_devices(devices=2), precision="bf16")
    reps = multidev.replicate(bf16, setup, SPEC.init(0))
    got = flat(reps.gradients(reps.place(shards(x, y, dtype=np.float32))))
    want = flat(reference.gradients(SPEC, SPEC.init(0), x, y, SIZES, masks=whole_masks()))
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert err < BF16_STEP_RTOL, f"bf16 gradients are {err:.2f} of their norm away from float64's"


def test_training_without_the_cores_masks_is_refused(engine):
    x, y = data()
    reps = replicas(engine, "float32")
    before = reps.state()
    for step in (lambda b: reps.train_step(b, lr=0.1), reps.gradients):
        with pytest.raises(multidev.MultidevError, match="masks are missing") as caught:
            step(reps.place(shards(x, y, masks=False)))
        assert "\n" not in str(caught.value)
    assert_states_close(reps.state(), before, rtol=0, promise="a refused step changed the model")
    assert reps.evaluate(reps.place(multidev.cut(x, y, SIZES))).count == len(x)  # inference needs no masks


def windows() -> nn.Model:
    """Windows that MXNet's operators cannot pad alone (:mod:`multidev_mxnet.windows`), and the CNN zoo's
    activations: "same" and four-sided padding, ceil_mode's windows past the padding, a squeeze-and-excitation
    gate."""
    x = nn.Input()
    h = nn.Conv2d(4, 3, stride=2, padding="same", dilation=2)(x)
    h = nn.AvgPool2d(3, stride=2, ceil_mode=True)(nn.HardSwish()(nn.BatchNorm(eps=1e-3, momentum=0.3)(h)))
    h = nn.Conv2d(4, 3, padding=(0, 1, 1, 2), groups=4)(h)
    gate = nn.HardSigmoid()(nn.Conv2d(4, 1)(nn.LeakyReLU(0.2)(nn.GlobalAvgPool(keepdims=True)(h))))
    h = nn.Mul()(nn.GELU(approximate="tanh")(h), gate)
    a = nn.MaxPool2d(3, stride=2, padding="same", ceil_mode=True)(h)
    b = nn.AvgPool2d(2, stride=2, padding=(1, 0, 0, 1), ceil_mode=True, count_include_pad=False)(nn.SiLU()(h))
    return nn.Model(x, nn.Dense()(nn.Concat()(nn.Flatten()(a), nn.Flatten()(nn.ReLU6()(b)))))


WINDOWS = ModelSpec("windows", (2, 13, 11), 3, graph=windows().graph())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_windows_past_the_operators_padding_match_the_reference(engine, dtype):
    """float32 too: there oneDNN runs the pools, and its backward of Pooling's "full" convention counts positions
    past the padding (why such windows are padded explicitly)."""
    rng = np.random.default_rng(2)
    x, y = rng.normal(0, 1, (sum(SIZES), *WINDOWS.in_shape)), rng.integers(0, WINDOWS.num_classes, sum(SIZES))
    start, rtol = WINDOWS.init(3), FLOAT64_RTOL if dtype == "float64" else CROSS_ENGINE_RTOL
    reps = multidev.replicate(engine, multidev.Setup(WINDOWS, resolve_devices(devices=2), "local", dtype), start)
    assert_states_close({"logits": reps.predict(reps.place(multidev.cut(x, None, SIZES)))},
                        {"logits": reference.predict(WINDOWS, start, x)}, rtol=rtol, promise=f"{dtype} logits")
    got, want = reps.gradients(reps.place(multidev.cut(x, y, SIZES))), reference.gradients(WINDOWS, start, x, y, SIZES)
    floor = 1e-3 * max(float(np.abs(g).max()) for g in want.values())  # the bias before BatchNorm: exactly 0
    assert_states_close(got, want, rtol=rtol, floor=floor, promise=f"{dtype} gradients of padded windows")


def tokens() -> nn.Model:
    """What the kit's token cases leave out: MatMul broadcasting leading axes (a missing one and a size-1 one),
    a stepped Slice of the last axis, Concat and Softmax off the last axis, a transpose of three axes, LayerNorm
    over the last two axes with a scale (MXNet's LayerNorm on merged axes), and DropPath in a pre-norm block."""
    x = nn.Input()
    t = nn.Transpose((1, 0))(nn.Reshape((4, -1))(nn.Conv2d(4, 2, stride=2)(x)))  # (9, 4)
    t = nn.PositionEmbedding()(nn.ClassToken()(t))  # (10, 4)
    t = nn.Residual(nn.LayerNorm(last=1), nn.MultiHeadAttention(2), nn.DropPath(0.5), name="block")(t)
    u = nn.Dense(6)(t)  # (10, 6)
    c = nn.Concat(axis=-1)(nn.Slice(-1, 1, None, 2)(u), nn.Softmax(0)(nn.Slice(1, 0, 3)(u)))  # (10, 6)
    r = nn.LayerNorm(last=2)(nn.Transpose((2, 0, 1))(nn.Reshape((2, 5, 6))(c)))  # (6, 2, 5)
    a = nn.MatMul()(r, nn.Dense(3)(nn.Slice(0, 0, 5)(t)))  # (6, 2, 5) @ (5, 3): the 6 broadcast
    keys = nn.Reshape((2, 4, 2))(nn.Dense(4)(nn.Slice(0, 0, 4)(t)))
    b = nn.MatMul()(nn.Reshape((1, 3, 4))(nn.Slice(0, 0, 3)(t)), keys)  # (1, 3, 4) @ (2, 4, 2): the 1 broadcast
    return nn.Model(x, nn.Dense()(nn.Concat()(nn.Flatten()(nn.Scale(0.5)(a)), nn.Flatten()(b))))


TOKENS = ModelSpec("tokens", (2, 6, 6), 3, graph=tokens().graph())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_token_layers_of_any_rank_match_the_reference(engine, dtype):
    """float32 too: there oneDNN runs FullyConnected, batch_dot and LayerNorm."""
    rng = np.random.default_rng(4)
    x, y = rng.normal(0, 1, (sum(SIZES), *TOKENS.in_shape)), rng.integers(0, TOKENS.num_classes, sum(SIZES))
    start, rtol = TOKENS.init(5), FLOAT64_RTOL if dtype == "float64" else CROSS_ENGINE_RTOL
    reps = multidev.replicate(engine, multidev.Setup(TOKENS, resolve_devices(devices=2), "local", dtype), start)
    assert list(reps.state()) == [p.name for p in TOKENS.params()]
    assert_states_close({"logits": reps.predict(reps.place(multidev.cut(x, None, SIZES)))},
                        {"logits": reference.predict(TOKENS, start, x)}, rtol=rtol, promise=f"{dtype} logits")
    masks = shard_masks(TOKENS.dropouts(), 0, 0, 0, 0, SIZES, np.dtype(dtype))  # DropPath: one per sample
    cut = dataclasses.replace(multidev.cut(x, y, SIZES), masks=masks)
    want = reference.gradients(TOKENS, start, x, y, SIZES, masks={k: np.concatenate(v) for k, v in masks.items()})
    floor = 1e-3 * max(float(np.abs(g).max()) for g in want.values())  # fc1.bias: exactly 0 (shifts normalised away)
    assert_states_close(reps.gradients(reps.place(cut)), want, rtol=rtol, floor=floor,
                        promise=f"{dtype} gradients of token layers")


def attention_groups(net) -> list[int]:
    """The group counts of the grouped convolutions in a traced network's graph."""
    graph = json.loads(net._cached_graph[1].tojson())
    return [int(n["attrs"]["num_group"]) for n in graph["nodes"] if n["op"] == "Convolution"
            and int(n["attrs"].get("num_group", 1)) > 1]


def test_attention_products_are_grouped_convolutions_only_where_rows_never_mix(engine):
    """float32 with a full batch's rows (Setup.rows over the devices): one group per sample and head; float64,
    a network with BatchNorm, or batches of any size: ``batch_dot``."""
    def tokens(*norm) -> nn.Sequential:  # 25 tokens of 8
        return nn.Sequential(nn.Conv2d(8, 2, stride=2), *norm, nn.Reshape((8, -1)), nn.Transpose((1, 0)),
                             nn.MultiHeadAttention(2), nn.Flatten(), nn.Dense(3))

    attention, with_batchnorm = tokens(), tokens(nn.BatchNorm())
    vit = nn.vit(patch=2, dim=8, depth=2, heads=2, mlp=16)  # 26 tokens, the attention inside Residual blocks
    found = {}
    cases = [("float32", attention, "float32", 12), ("float64", attention, "float64", 12),
             ("batchnorm", with_batchnorm, "float32", 12), ("any rows", attention, "float32", None),
             ("vit", vit, "float32", 12)]
    for name, net, dtype, rows in cases:
        spec = ModelSpec(name, (3, 10, 10), 3, net.graph())
        setup = multidev.Setup(spec, resolve_devices(devices=2), "local", dtype, rows=rows)
        reps = multidev.replicate(engine, setup, spec.init(0))
        found[name] = (reps.net.rows, attention_groups(reps.net))
    assert found == {"float32": (6, [12, 12]), "float64": (None, []), "batchnorm": (None, []), "any rows": (None, []),
                     "vit": (6, [12] * 4)}


def test_a_full_shard_is_the_first_devices_share_on_cpus_only():
    from multidev_mxnet.rows import shard_rows

    def setup(rows, devices, processes=1):
        return multidev.Setup(SPEC, tuple(devices), rows=rows, group=multidev.ProcessGroup(rank=0, size=processes))

    assert [shard_rows(setup(33, ["cpu:0", "cpu:1"])), shard_rows(setup(32, ["cpu:0"], processes=3)),
            shard_rows(setup(1, ["cpu:0", "cpu:1"])), shard_rows(setup(None, ["cpu:0"])),
            shard_rows(setup(32, ["gpu:0"]))] == [17, 11, 1, None, None]


@pytest.mark.parametrize("tokens", [16, 24, 64, 68, 196])
def test_token_counts_oneDNN_blocks_keep_batch_dot_and_the_guard_holds(tokens, monkeypatch):
    """A multiple of 4 tokens stays ``batch_dot`` (oneDNN's blocked layouts: slower, and MXNet's transpose failed
    on their gradients); forced onto the convolutions, the ``clip`` guard still gives ``batch_dot``'s values."""
    from multidev_mxnet import rows, tokens as blocks

    assert not rows.grouped((tokens, 8))
    monkeypatch.setattr(blocks, "grouped", lambda shape: True)
    results = attention_both_ways(tokens, 8, 2)
    for got, want in zip(*results[::-1]):
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), tokens


def test_bf16_vit_on_grouped_convolutions(bf16):
    """contrib.amp casts the grouped convolutions to bfloat16 like any Convolution: the logits stay within
    bfloat16's rounding of the float32 network's."""
    spec = ModelSpec("vit", (3, 10, 10), 3, nn.vit(patch=2, dim=8, depth=1, heads=2, mlp=16).graph())
    x = np.random.default_rng(0).normal(size=(7, *spec.in_shape)).astype(np.float32)
    logits = {}
    for precision in ("fp32", "bf16"):
        setup = multidev.Setup(spec, resolve_devices(devices=2), precision=precision, rows=8)
        reps = multidev.replicate(bf16, setup, spec.init(1))
        assert reps.net.rows == 4
        logits[precision] = reps.predict(reps.place(multidev.cut(x, None, SIZES_OF_7)))
    assert np.abs(logits["bf16"] - logits["fp32"]).max() <= 0.05 * np.abs(logits["fp32"]).max()


@pytest.mark.parametrize("tokens", [21, 26, 33, 50, 65, 66, 197])
@pytest.mark.parametrize("width, heads", [(8, 2), (32, 2), (48, 3)])
def test_grouped_attention_equals_batch_dot(tokens, width, heads):
    """Every token count the grouped form is taken for: its outputs and gradients (input and parameters) are
    ``batch_dot``'s within float32's rounding."""
    from multidev_mxnet import rows

    assert rows.grouped((tokens, width))
    results = attention_both_ways(tokens, width, heads)
    for got, want in zip(*results[::-1]):
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), (tokens, width, heads)


def attention_both_ways(tokens: int, width: int, heads: int) -> list[list[np.ndarray]]:
    """One attention block on 3 samples, with ``batch_dot`` and compiled for 3 rows: its output and the input's and
    parameters' gradients, each way."""
    from multidev_mxnet import tokens as blocks
    from multidev_mxnet.runtime import mxnet

    mx = mxnet()
    rng = np.random.default_rng(tokens)
    x, dy = (mx.nd.array(rng.normal(size=(3, tokens, width))) for _ in range(2))
    results = []
    for fixed in (None, 3):
        block = blocks.MultiHeadAttention(nn.MultiHeadAttention(heads), (tokens, width), fixed)
        assert block.rows == fixed
        block.initialize()
        block.hybridize(static_alloc=True)
        for param in block.collect_params().values():
            param.set_data(mx.nd.array(np.random.default_rng(1).normal(0, 0.3, param.shape)))
        x.attach_grad()
        with mx.autograd.record():
            y = block(x)
        y.backward(dy)
        results.append([y.asnumpy(), x.grad.asnumpy(), *(p.grad().asnumpy() for p in block.collect_params().values())])
    return results
