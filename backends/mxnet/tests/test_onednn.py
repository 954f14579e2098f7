"""float32's own forms of layers (:mod:`multidev_mxnet.onednn`) against the exact ones float64 keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import multidev
from multidev import nn, reference
from multidev.rules.models import ModelSpec
from multidev_mxnet import model, onednn
from multidev_mxnet.runtime import mxnet

mx = mxnet()
nd, autograd = mx.nd, mx.autograd


class _Function(mx.gluon.nn.HybridBlock):
    """``f(F, x)`` as a block, to run it compiled as the network does."""

    def __init__(self, f) -> None:
        super().__init__()
        self.f = f

    def hybrid_forward(self, F, x):
        return self.f(F, x)


def _value_and_grad(f, x: np.ndarray, hybrid: bool, dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """``f(x)`` and its gradient for an output gradient of distinct values (so that a mask shows, not a sum)."""
    block = _Function(f)
    if hybrid:
        block.hybridize(static_alloc=True)
    data = nd.array(x, dtype=dtype)
    data.attach_grad()
    with autograd.record():
        out = block(data)
    out.backward(nd.array(np.arange(1, out.size + 1).reshape(out.shape), dtype=dtype))
    return out.asnumpy(), data.grad.asnumpy()


def _around(bound: float) -> list[float]:
    """``bound`` and its float32 neighbours on either side."""
    b = np.float32(bound)
    return [np.nextafter(b, np.float32(-np.inf)), b, np.nextafter(b, np.float32(np.inf))]


#: every boundary case of clip(x, 0, 6): exactly 0 (both signs) and 6, their neighbours, the extremes
EDGES = np.array([-np.inf, -7.0, -1e-30, -0.0, *_around(0.0), 1e-30, 3.0, *_around(6.0), 7.0, np.inf], np.float32)


@pytest.mark.parametrize("hybrid", [False, True], ids=["imperative", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_exact_relu6_passes_a_gradient_strictly_inside_its_bounds(hybrid, dtype):
    """As torch's hardtanh, jax.nn.relu6 and the reference: none at exactly 0 (either sign) or 6; NaN passes."""
    x = np.concatenate([EDGES, [np.nan]]).reshape(1, 1, -1, 1)
    got, grad = _value_and_grad(lambda F, v: model._clip(F, v, 0.0, 6.0), x, hybrid, dtype)
    values = x.ravel().astype(dtype)
    want, inside = reference.layers.relu6(values)
    np.testing.assert_array_equal(got.ravel(), want)
    np.testing.assert_array_equal(grad.ravel() > 0, inside)
    assert inside[list(EDGES).index(6.0)] == False and inside[list(EDGES).index(3.0)] == True  # noqa: E712


@pytest.mark.parametrize("hybrid", [False, True], ids=["imperative", "compiled"])
def test_relu6_is_the_exact_form_in_values_and_gradients_but_on_its_bounds(hybrid):
    """Its values the exact form's; its gradient too, but for inputs exactly 0 or 6, where it passes; NaN passes."""
    rng = np.random.default_rng(0)
    x = np.concatenate([EDGES, rng.normal(0, 4, 2018).astype(np.float32)]).reshape(2, 1, -1, 4)
    want, want_grad = _value_and_grad(lambda F, v: model._clip(F, v, 0.0, 6.0), x, hybrid)
    got, got_grad = _value_and_grad(lambda F, v: onednn.clip(F, v, 6.0), x, hybrid)
    np.testing.assert_array_equal(got, want)
    bounds = (x == 0.0) | (x == 6.0)
    np.testing.assert_array_equal(got_grad[~bounds], want_grad[~bounds])
    assert bounds.sum() == 3 and (got_grad[bounds] > 0).all() and (want_grad[bounds] == 0).all()  # -0, 0, 6
    nan, _ = _value_and_grad(lambda F, v: onednn.clip(F, v, 6.0), np.array([np.nan, 1.0], np.float32), hybrid)
    assert np.isnan(nan[0]) and nan[1] == 1.0


def _layer_norm_grads(x, gamma, beta, og, dtype: str, fast: bool) -> list[np.ndarray]:
    """Output and gradients (x, gamma, beta) of MXNet's LayerNorm in ``dtype``, or of float32's form."""
    units = x.shape[-1]
    arrays = [nd.array(a, dtype=dtype) for a in (x, gamma, beta)]
    for a in arrays:
        a.attach_grad()
    mean, spread = nd.full((1, units), 1.0 / units), nd.ones((units, 1))
    with autograd.record():
        if fast:
            out = onednn.layer_norm(nd, *arrays, mean, spread, 1e-6, units)
        else:
            out = nd.LayerNorm(*arrays, axis=-1, eps=1e-6)
    out.backward(nd.array(og, dtype=dtype))
    return [out.asnumpy()] + [a.grad.asnumpy() for a in arrays]


@pytest.mark.parametrize("shape", [(4, 65, 64), (3, 7, 60)], ids=["vit", "odd-width"])
def test_layer_norm_form_matches_the_float64_operator(shape):
    """Output, input gradient and the scale's and shift's gradients (sums over rows), within float32's rounding;
    a width whose 1 / units is no float32 number; rows off zero mean and unit spread."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.5, 3.0, shape).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, shape[-1:]), rng.normal(0, 1, shape[-1:])
    og = rng.normal(0, 1, shape)
    want = _layer_norm_grads(x, gamma, beta, og, "float64", fast=False)
    got = _layer_norm_grads(x, gamma, beta, og, "float32", fast=True)
    for name, g, w in zip(("output", "x grad", "gamma grad", "beta grad"), got, want):
        err = float(np.max(np.abs(g - w)) / np.max(np.abs(w)))
        assert err < 1e-5, f"float32 LayerNorm's {name} is {err:.1e} (relative) from float64's"


@pytest.mark.parametrize("keepdims", [False, True])
def test_global_average_pooling_matches_the_float64_mean(keepdims):
    class Layer:
        pass

    Layer.keepdims = keepdims
    x = np.random.default_rng(2).normal(1.0, 2.0, (4, 40, 4, 4)).astype(np.float32)
    got, got_grad = _value_and_grad(lambda F, v: onednn.global_avg_pool(F, Layer, [v], [x.shape[1:]]), x, True)
    want, want_grad = _value_and_grad(lambda F, v: F.mean(v, axis=(2, 3), keepdims=keepdims), x, True, "float64")
    assert got.shape == want.shape == ((4, 40, 1, 1) if keepdims else (4, 40))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
    np.testing.assert_allclose(got_grad, want_grad, rtol=0, atol=1e-6 * np.abs(want_grad).max())


def test_hard_sigmoid_passes_a_gradient_strictly_inside_its_bounds():
    x = np.array([-4.0, -3.0, -2.0, 0.0, 2.0, 3.0, 4.0])
    got, grad = _value_and_grad(lambda F, v: model._hard_sigmoid(F, v), x, True, "float64")
    want, inside = reference.layers.hard_sigmoid(x)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_array_equal(grad > 0, inside)


def _definition() -> nn.Model:
    """A ReLU6 after BatchNorm, the global pooling and a LayerNorm of tokens, side by side."""
    x = nn.Input()
    h = nn.ReLU6()(nn.BatchNorm()(nn.Conv2d(8, 3, padding=1)(x)))  # (8, 6, 6)
    tokens = nn.LayerNorm(last=1)(nn.Transpose((1, 0))(nn.Reshape((8, -1))(h)))  # (36, 8)
    return nn.Model(x, nn.Dense()(nn.Concat()(nn.GlobalAvgPool()(h), nn.Flatten()(tokens))))


SPEC = ModelSpec("forms", (3, 6, 6), 4, graph=_definition().graph())


def _operators(dtype: str) -> dict[str, list[str]]:
    """The compiled network's operators in ``dtype``, each with its nodes' names."""
    net = model.build(SPEC, exact=dtype != "float32")
    net.initialize()
    net.cast(dtype)
    net.hybridize(static_alloc=True)
    net(*net.example(mx.cpu(), np.dtype(dtype)))
    found: dict[str, list[str]] = {}
    for node in json.loads(net._cached_graph[1].tojson())["nodes"]:
        found.setdefault(node["op"], []).append(node["name"])
    return found


def test_float64_keeps_the_exact_forms_and_float32_takes_its_own():
    exact, fast = _operators("float64"), _operators("float32")
    assert {"_minimum", "LayerNorm", "mean"} <= set(exact) and len(exact["FullyConnected"]) == 1  # the classifier
    assert not {"_minimum", "LayerNorm", "mean"} & set(fast) and len(fast["FullyConnected"]) == 1 + 5 + 1
    assert "_minimum_scalar" in fast and "_minimum_scalar" not in exact  # ReLU6's bound given last
    statistics = [name for name in fast["FullyConnected"] if onednn.KEEP_FLOAT32 in name]
    assert len(statistics) == 5 + 1  # LayerNorm's, the pooling's: bfloat16 leaves them in float32


def _onednn_kernels(script: str) -> list[list[str]]:
    """The fields of each oneDNN primitive ``script`` runs in a fresh process (``DNNL_VERBOSE``'s exec lines)."""
    env = {**os.environ, "DNNL_VERBOSE": "1", "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split(",") for line in done.stdout.splitlines() if line.startswith("dnnl_verbose,exec")]


#: a float32 training step of MobileNetV2's pattern; prints oneDNN's kernels (DNNL_VERBOSE)
STEP = """
    import numpy as np
    import multidev
    from multidev import nn
    from multidev.rules.devices import resolve_devices
    from multidev.rules.models import ModelSpec

    x = nn.Input()
    h = nn.ReLU6()(nn.BatchNorm()(nn.Conv2d(144, 1, bias=False)(x)))  # oneDNN's 8-channel blocks (24 in)
    h = nn.ReLU6()(nn.BatchNorm()(nn.Conv2d(144, 3, padding=1, groups=144, bias=False)(h)))  # 16-channel ones
    h = nn.BatchNorm()(nn.Conv2d(24, 1, bias=False)(h))
    spec = ModelSpec("pattern", (24, 6, 6), 3, graph=nn.Model(x, nn.Dense()(nn.GlobalAvgPool()(h))).graph())
    setup = multidev.Setup(spec, resolve_devices(devices=1), "local", "float32")
    reps = multidev.replicate(multidev.load_backend("mxnet"), setup, spec.init(0))
    rng = np.random.default_rng(0)
    cut = multidev.cut(rng.normal(0, 1, (8, 24, 6, 6)), rng.integers(0, 3, 8), [8])
    reps.gradients(reps.place(cut))
"""


def test_a_float32_step_of_mobilenet_blocks_runs_no_onednn_reference_kernel():
    """A ReLU6 between convolutions of different blocked layouts must hand BatchNorm's backward its gradient in
    its data's layout: otherwise oneDNN falls back to its reference kernel, 100 times slower."""
    kernels = _onednn_kernels(STEP)
    assert any(k[3] == "batch_normalization" and k[5] == "backward" for k in kernels), "no BatchNorm backward ran"
    slow = sorted({f"{k[3]} {k[4]} {k[5]}" for k in kernels if "ref" in k[4]})
    assert not slow, f"oneDNN's reference kernels ran: {slow}"


#: a bfloat16 step of a LayerNorm of tokens and a global pooling; prints oneDNN's kernels (DNNL_VERBOSE)
BF16_STEP = """
    import numpy as np
    import multidev
    from multidev import nn
    from multidev.rules.devices import resolve_devices
    from multidev.rules.models import ModelSpec

    x = nn.Input()
    h = nn.Conv2d(8, 3, padding=1)(x)  # (8, 6, 6)
    tokens = nn.Dense(12)(nn.LayerNorm(last=1)(nn.Transpose((1, 0))(nn.Reshape((8, -1))(h))))  # (36, 12)
    out = nn.Dense()(nn.Concat()(nn.GlobalAvgPool()(h), nn.Flatten()(tokens)))
    spec = ModelSpec("statistics", (3, 6, 6), 5, graph=nn.Model(x, out).graph())
    setup = multidev.Setup(spec, resolve_devices(devices=1), precision="bf16")
    reps = multidev.replicate(multidev.load_backend("mxnet"), setup, spec.init(0))
    rng = np.random.default_rng(0)
    reps.gradients(reps.place(multidev.cut(rng.normal(0, 1, (4, 3, 6, 6)), rng.integers(0, 5, 4), [4])))
"""


@pytest.fixture(scope="module")
def engine():
    return multidev.load_backend("mxnet")


def test_bfloat16_leaves_the_statistics_in_float32(bf16):
    """The FullyConnected ops of LayerNorm's statistics and of the pooling's sums (one of their sides 1 wide) run
    in float32, the projections in bfloat16."""
    products = [k for k in _onednn_kernels(BF16_STEP) if k[2] == "cpu" and k[3].startswith("inner")]
    statistics = [p for p in products if "ic1oc" in p[-2] or p[-2].endswith("oc1")]
    assert statistics and all("bf16" not in p[6] for p in statistics), "statistics computed in bfloat16"
    assert any("bf16" in p[6] for p in products if p not in statistics), "no projection ran in bfloat16"
