"""The reference's grouped, dilated and padded windows, ceil_mode pools and CNN-zoo activations, against torch.

Each layer of ``multidev.nn`` runs as the reference's graph node (so the
layer's own hyperparameters reach the arithmetic: ``sides()``,
``ceil_extra()``, eps, momentum) and is compared with torch autograd in
float64, forward and backward: torch's functional ops are the definition
the model language states its rules by.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import pytest

from multidev import nn
from multidev.reference import layers as L
from multidev.reference import network

torch = pytest.importorskip("torch")
F = torch.nn.functional

TOL = 1e-13  # float64: the same arithmetic in another order


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the largest magnitude of ``want``; absolute at 0."""
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = float(np.max(np.abs(want), initial=0.0))
    return float(np.max(np.abs(got - want), initial=0.0)) / (scale if scale > 0 else 1.0)


def run_node(layer: nn.Layer, xs: list[np.ndarray], params: Optional[dict] = None, train: bool = True, seed: int = 9):
    """(output, dy, input gradients, parameter gradients, parameters after) of ``layer`` as one reference node."""
    node = network.node("n", layer)
    run = network.Run([{f"n.{k}": v.copy() for k, v in (params or {}).items()}], train=train)
    y = node.forward(run, [[x] for x in xs])[0]
    dy = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype)
    dxs = [parts[0] for parts in node.backward(run, [dy])] if train else []
    return y, dy, dxs, {k[2:]: v for k, v in run.grads[0].items()}, {k[2:]: v for k, v in run.params[0].items()}


def against_torch(layer: nn.Layer, xs: list[np.ndarray], theirs: Callable, params: Optional[dict] = None,
                  tol: float = TOL, state: Optional[dict] = None) -> float:
    """The node's output and gradients (inputs, then parameters by name) against ``theirs(*inputs, **params)``;
    ``state``: arrays the node holds that torch does not take (running statistics)."""
    params = params or {}
    y, dy, dxs, grads, _ = run_node(layer, xs, {**params, **(state or {})})
    tx = [torch.from_numpy(x).requires_grad_() for x in xs]
    tp = {k: torch.from_numpy(v).requires_grad_() for k, v in params.items()}
    want = theirs(*tx, **tp)
    wanted = torch.autograd.grad(want, tx + list(tp.values()), torch.from_numpy(dy))
    errors = [rel_err(y, want.detach().numpy())]
    errors += [rel_err(g, w.numpy()) for g, w in zip(dxs + [grads[k] for k in tp], wanted)]
    assert y.dtype == np.float64 and max(errors) < tol, errors
    return max(errors)


def image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def padded(x, sides, value: float = 0.0):
    """torch's input with the four sides (top, bottom, left, right) added."""
    top, bottom, left, right = sides
    return F.pad(x, (left, right, top, bottom), value=value)


# Convolutions ----------------------------------------------------------------------------------------
CONVS = {
    "depthwise": (nn.Conv2d(4, 3, padding=1, groups=4), (4, 6, 6)),
    "depthwise-multiplier-2": (nn.Conv2d(8, 3, stride=2, padding=1, groups=4), (4, 7, 7)),
    "groups-2": (nn.Conv2d(4, 3, padding=1, groups=2, bias=False), (6, 5, 6)),
    "dilation-2": (nn.Conv2d(3, 3, padding=2, dilation=2), (2, 7, 7)),
    "dilation-2-groups-2-stride-2": (nn.Conv2d(4, 3, stride=2, padding=1, groups=2, dilation=2), (4, 8, 7)),
    "four-sides-stride-2": (nn.Conv2d(3, 3, stride=2, padding=(0, 1, 1, 2)), (2, 6, 6)),
    "rows-columns": (nn.Conv2d(3, 3, padding=(2, 0)), (2, 5, 6)),
    "same-stride-2-6x6": (nn.Conv2d(3, 3, stride=2, padding="same"), (2, 6, 6)),
    "same-stride-2-7x7": (nn.Conv2d(3, 3, stride=2, padding="same"), (2, 7, 7)),
    "same-even-kernel-stride-2": (nn.Conv2d(3, 4, stride=2, padding="same"), (2, 7, 6)),
    "same-dilation-2": (nn.Conv2d(2, 3, padding="same", dilation=2), (3, 6, 5)),
}


def conv_params(layer: nn.Conv2d, shape: tuple[int, ...]) -> dict:
    r = np.random.default_rng(1)
    return {name: r.standard_normal(s) for name, s, _ in layer.params([shape])}


@pytest.mark.parametrize("case", list(CONVS))
def test_conv2d_matches_torch(case):
    layer, shape = CONVS[case]
    sides = layer.sides(shape)

    def theirs(x, weight, bias=None):
        return F.conv2d(padded(x, sides), weight, bias, layer.stride, 0, layer.dilation, layer.groups)
    x = image((3, *shape))
    against_torch(layer, [x], theirs, conv_params(layer, shape))
    assert run_node(layer, [x], conv_params(layer, shape))[0].shape[1:] == layer.infer("n", [shape])


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch copies the input for an even kernel
@pytest.mark.parametrize("kernel,dilation", [(3, 1), (4, 1), (3, 2), (2, 3)])
def test_same_padding_is_torchs_at_stride_1(kernel, dilation):
    """torch's own padding="same" (stride 1 only): the odd extra row and column after, as ours."""
    layer, shape = nn.Conv2d(2, kernel, padding="same", dilation=dilation), (3, 6, 5)
    against_torch(layer, [image((2, *shape))],
                  lambda x, weight, bias: F.conv2d(x, weight, bias, 1, "same", dilation), conv_params(layer, shape))


# Pools -----------------------------------------------------------------------------------------------
POOLS = {  # layer, input (C, H, W): torch's F.max_pool2d / F.avg_pool2d take every one of these as they are
    "max-3-2-pad-1": (nn.MaxPool2d(3, stride=2, padding=1), (2, 6, 6)),
    "max-3-2-pad-1-7x7": (nn.MaxPool2d(3, stride=2, padding=1), (2, 7, 7)),
    "max-3-2-ceil-6x6": (nn.MaxPool2d(3, stride=2, ceil_mode=True), (2, 6, 6)),
    "max-3-2-ceil-8x7": (nn.MaxPool2d(3, stride=2, ceil_mode=True), (2, 8, 7)),
    "max-2-ceil-5x5": (nn.MaxPool2d(2, ceil_mode=True), (2, 5, 5)),
    "max-3-2-pad-1-ceil-6x6": (nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), (2, 6, 6)),
    "max-3-2-pad-1-ceil-7x7": (nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), (2, 7, 7)),
    "max-rows-columns": (nn.MaxPool2d(3, stride=1, padding=(1, 0)), (2, 5, 6)),
    "avg-3-2-pad-1": (nn.AvgPool2d(3, stride=2, padding=1), (2, 6, 6)),
    "avg-3-2-pad-1-excluded": (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), (2, 7, 7)),
    "avg-3-2-ceil-6x6": (nn.AvgPool2d(3, stride=2, ceil_mode=True), (2, 6, 6)),
    "avg-2-ceil-5x5": (nn.AvgPool2d(2, ceil_mode=True), (2, 5, 5)),
    "avg-3-2-pad-1-ceil-6x6": (nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), (2, 6, 6)),
    "avg-3-2-pad-1-ceil-7x7": (nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), (2, 7, 7)),
    "avg-3-2-pad-1-ceil-6x6-excluded": (nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                                     count_include_pad=False), (2, 6, 6)),
    "avg-3-2-pad-1-ceil-7x7-excluded": (nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                                     count_include_pad=False), (2, 7, 7)),
    "avg-4-3-pad-2-ceil-8x9": (nn.AvgPool2d(4, stride=3, padding=2, ceil_mode=True), (2, 8, 9)),
    "avg-rows-columns-excluded": (nn.AvgPool2d(3, stride=2, padding=(1, 0), count_include_pad=False), (2, 6, 7)),
}


def torch_pool(layer: nn.MaxPool2d) -> Callable:
    padding = layer.padding if isinstance(layer.padding, int) else tuple(layer.padding)
    if isinstance(layer, nn.AvgPool2d):
        return lambda x: F.avg_pool2d(x, layer.kernel_size, layer.step, padding, layer.ceil_mode,
                                      layer.count_include_pad)
    return lambda x: F.max_pool2d(x, layer.kernel_size, layer.step, padding, 1, layer.ceil_mode)


@pytest.mark.parametrize("case", list(POOLS))
def test_pool_matches_torch(case):
    layer, shape = POOLS[case]
    against_torch(layer, [image((3, *shape))], torch_pool(layer))
    assert run_node(layer, [image((3, *shape))])[0].shape[1:] == layer.infer("n", [shape])


@pytest.mark.parametrize("case", [c for c in POOLS if c.startswith("max")])
def test_max_pool_padding_never_wins_and_ties_as_torch(case):
    """All values below 0 (so zeros in the padding would win) and many ties: torch's winners, torch's gradient."""
    layer, shape = POOLS[case]
    x = -np.random.default_rng(8).integers(1, 4, (3, *shape)).astype(np.float64)
    against_torch(layer, [x], torch_pool(layer), tol=1e-15)


def sum_pool(x, k: int, stride: int):
    return F.avg_pool2d(x, k, stride, divisor_override=1)


@pytest.mark.parametrize("layer,shape", [
    (nn.MaxPool2d(3, stride=2, padding="same"), (2, 6, 7)),
    (nn.MaxPool2d(2, stride=2, padding=(0, 1, 1, 0), ceil_mode=True), (2, 5, 6)),
    (nn.AvgPool2d(3, stride=2, padding="same"), (2, 6, 7)),
    (nn.AvgPool2d(3, stride=2, padding=(0, 1, 1, 0), ceil_mode=True), (2, 6, 6)),
    (nn.AvgPool2d(3, stride=2, padding="same", count_include_pad=False), (2, 6, 7)),
    (nn.AvgPool2d(3, stride=2, padding=(0, 1, 1, 0), ceil_mode=True, count_include_pad=False), (2, 7, 6)),
])
def test_uneven_pool_padding_as_torch_on_the_padded_input(layer, shape):
    """Sides torch's pools cannot take: max of the input padded with -inf; a mean over the padded extent
    (ceil_mode's positions past it are torch's own, uncounted), or over the input's pixels only (a sum over a
    count of ones)."""
    sides, k, s, ceil = layer.sides(shape), layer.kernel_size, layer.step, layer.ceil_mode
    if isinstance(layer, nn.AvgPool2d) and not layer.count_include_pad:
        extra = layer.ceil_extra(shape)
        top, bottom, left, right = sides

        def theirs(x):
            ones = torch.ones_like(x)
            pad = (left, right + extra[1], top, bottom + extra[0])
            return sum_pool(F.pad(x, pad), k, s) / sum_pool(F.pad(ones, pad), k, s)
    elif isinstance(layer, nn.AvgPool2d):
        def theirs(x):
            return F.avg_pool2d(padded(x, sides), k, s, 0, ceil)
    else:
        def theirs(x):
            return F.max_pool2d(padded(x, sides, -np.inf), k, s, 0, 1, ceil)
    against_torch(layer, [image((3, *shape))], theirs)


def test_global_avg_pool_keepdims():
    x = image((3, 4, 5, 6))
    against_torch(nn.GlobalAvgPool(keepdims=True), [x], lambda t: t.mean(dim=(2, 3), keepdim=True))
    against_torch(nn.GlobalAvgPool(), [x], lambda t: t.mean(dim=(2, 3)))


# Activations -----------------------------------------------------------------------------------------
KINKS = np.array([-6.0, -3.0, -1e-300, 0.0, 3.0, 6.0, 1e-300])  # where torch's gradient rules choose a side

ACTIVATIONS = {
    "ReLU6": (nn.ReLU6(), F.relu6),
    "LeakyReLU": (nn.LeakyReLU(0.2), lambda t: F.leaky_relu(t, 0.2)),
    "GELU": (nn.GELU(), F.gelu),
    "GELU-tanh": (nn.GELU(approximate="tanh"), lambda t: F.gelu(t, approximate="tanh")),
    "SiLU": (nn.SiLU(), F.silu),
    "HardSigmoid": (nn.HardSigmoid(), F.hardsigmoid),
    "HardSwish": (nn.HardSwish(), F.hardswish),
}


@pytest.mark.parametrize("case", list(ACTIVATIONS))
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (40, 7)])
def test_activation_matches_torch(case, shape):
    """Kinks included: the same side as torch's. HardSigmoid's gradient is the exact 1/6, torch's 1/6 rounded to
    float32."""
    layer, theirs = ACTIVATIONS[case]
    x = image(shape) * 4
    x.flat[:len(KINKS)] = KINKS
    x.flat[len(KINKS):len(KINKS) + 4] = [-800.0, 800.0, -40.0, 40.0]  # the tails, where exp would overflow
    against_torch(layer, [x], theirs, tol=1e-7 if case == "HardSigmoid" else TOL)


# Normalisation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(6, 3, 4, 5), (7, 4)])
def test_batch_norm_eps_and_momentum_as_torch(shape):
    """Training: the output, gradients and the running mean as torch's; the running variance moves by the
    *biased* batch variance (the contract's), where torch's moves by the unbiased one."""
    layer = nn.BatchNorm(eps=1e-1, momentum=0.3)
    c, r = shape[1], np.random.default_rng(3)
    params = {"gamma": r.standard_normal(c), "beta": r.standard_normal(c)}
    stats = {"running_mean": r.standard_normal(c), "running_var": r.random(c) + 0.5}
    x = image(shape) * 2 + 1
    against_torch(layer, [x], lambda t, gamma, beta: F.batch_norm(
        t, None, None, gamma, beta, True, layer.momentum, layer.eps), params, state=stats)
    after = run_node(layer, [x], {**params, **stats})[4]
    axes = (0, *range(2, len(shape)))
    m = layer.momentum
    assert rel_err(after["running_mean"], (1 - m) * stats["running_mean"] + m * x.mean(axis=axes)) < TOL
    assert rel_err(after["running_var"], (1 - m) * stats["running_var"] + m * x.var(axis=axes)) < TOL
    y = run_node(layer, [x], {**params, **stats}, train=False)[0]
    want = F.batch_norm(*map(torch.from_numpy, (x, stats["running_mean"], stats["running_var"], params["gamma"],
                                                 params["beta"])), False, m, layer.eps)
    assert rel_err(y, want.numpy()) < TOL


@pytest.mark.parametrize("shape", [(3, 2, 4, 5), (4, 6)])
def test_layer_norm_eps_as_torch(shape):
    layer = nn.LayerNorm(eps=0.5)  # large, so that a wrong eps shows
    r = np.random.default_rng(6)
    params = {"gamma": r.standard_normal(shape[1]), "beta": r.standard_normal(shape[1])}
    tail = (1,) * (len(shape) - 2)

    def theirs(t, gamma, beta):
        return F.layer_norm(t, shape[1:], gamma.reshape(-1, *tail).expand(shape[1:]),
                            beta.reshape(-1, *tail).expand(shape[1:]), layer.eps)
    against_torch(layer, [image(shape) * 0.3], theirs, params)


# Mul -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [
    [(3, 4, 5), (3, 1, 1)],    # squeeze-and-excitation's gate
    [(3, 1, 1), (3, 4, 5)],
    [(3, 4, 5), (3, 4, 5)],
    [(3, 4, 5), (1, 4, 1), (3, 1, 5)],
    [(3, 4, 5), (5,)],         # fewer axes: aligned on the last, as NumPy
    [(1, 4, 1), (3, 1, 5)],    # both broadcast
    [(6,), (6,)],
])
def test_mul_matches_torch(shapes):
    xs = [image((2, *s), seed=i) for i, s in enumerate(shapes)]
    rank = max(len(s) for s in shapes)

    def theirs(*ts):
        y = ts[0].reshape(2, *(1,) * (rank - len(shapes[0])), *shapes[0])
        for t, s in zip(ts[1:], shapes[1:]):
            y = y * t.reshape(2, *(1,) * (rank - len(s)), *s)
        return y
    against_torch(nn.Mul(), xs, theirs)
    assert run_node(nn.Mul(), xs)[0].shape[1:] == nn.Mul().infer("n", shapes)


# dtypes ----------------------------------------------------------------------------------------------
def float32_cases() -> dict:
    x = image((2, 4, 7, 7)).astype(np.float32)
    w = image((4, 2, 3, 3), seed=1).astype(np.float32)
    gate = image((2, 4, 1, 1), seed=2).astype(np.float32)
    return {
        "conv2d-grouped": (lambda: L.conv2d(x, w, None, 2, (0, 1, 1, 2), 2, 2), L.conv2d_backward),
        "max_pool2d-ceil": (lambda: L.max_pool2d(x, 3, 2, 1, (1, 1)), L.max_pool2d_backward),
        "avg_pool2d-ceil": (lambda: L.avg_pool2d(x, 3, 2, 1, (1, 1), False), L.avg_pool2d_backward),
        "global_avg_pool": (lambda: L.global_avg_pool(x, True), L.global_avg_pool_backward),
        "relu6": (lambda: L.relu6(x), L.relu6_backward),
        "leaky_relu": (lambda: L.leaky_relu(x, 0.1), L.leaky_relu_backward),
        "gelu-tanh": (lambda: L.gelu(x, "tanh"), L.gelu_backward),
        "silu": (lambda: L.silu(x), L.silu_backward),
        "hard_sigmoid": (lambda: L.hard_sigmoid(x), L.hard_sigmoid_backward),
        "hard_swish": (lambda: L.hard_swish(x), L.hard_swish_backward),
        "mul": (lambda: L.mul([x, gate]), L.mul_backward),
    }


@pytest.mark.parametrize("name", sorted(float32_cases()))
def test_float32_stays_float32(name):
    forward, backward = float32_cases()[name]
    y, cache = forward()
    grads = backward(np.ones_like(y), cache)
    grads = [g for g in (grads if isinstance(grads, (tuple, list)) else [grads]) if g is not None]
    assert y.dtype == np.float32 and all(g.dtype == np.float32 for g in grads), [g.dtype for g in grads]


def test_float32_batch_norm_stays_float32():
    layer = nn.BatchNorm(eps=1e-3, momentum=0.01)
    one = np.ones(3, np.float32)
    y, _, dxs, grads, after = run_node(layer, [image((4, 3, 2, 2)).astype(np.float32)],
                                       {"gamma": one, "beta": one, "running_mean": one, "running_var": one})
    assert {a.dtype for a in [y, *dxs, *grads.values(), *after.values()]} == {np.dtype(np.float32)}
