"""multidev.reference.layers: each backward against central finite differences in float64, forwards against torch.

The reference is the float64 truth that engines are judged by, so its own
gradients are checked here against a definition that shares no code with it
(differences of the forward), and its forwards against torch.nn.functional in
float64 where the semantics match. float32 in gives float32 out, and max
pooling's ties go to the window's first maximum (torch's and ONNX's rule).
"""

import numpy as np
import pytest

from multidev.reference import layers as L

FD_RTOL = 1e-7  # finite differences with h = 1e-6 in float64 reach ~1e-9 here
STEP = 1e-6


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the largest magnitude of ``want`` (the contract's measure); absolute at 0."""
    scale = np.max(np.abs(want))
    return float(np.max(np.abs(got - want)) / (scale if scale > 0 else 1))


def numeric_grads(loss, args: list) -> list:
    """Central differences of ``loss()`` (a float) with respect to every element of every array in ``args``."""
    grads = []
    for a in args:
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + STEP
            plus = loss()
            a[i] = old - STEP
            minus = loss()
            a[i] = old
            g[i] = (plus - minus) / (2 * STEP)
        grads.append(g)
    return grads


def check_gradients(forward, backward, args: list, seed: int = 1) -> None:
    """backward(dy, cache) against differences of sum(forward(*args) * dy), for each array argument."""
    y, cache = forward(*args)
    dy = rng(seed).standard_normal(y.shape)
    got = backward(dy, cache)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = numeric_grads(lambda: float(np.sum(forward(*args)[0] * dy)), args)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (k, g.shape, w.shape)
        assert rel_err(g, w) < FD_RTOL, (k, rel_err(g, w))


def image(shape=(2, 3, 5, 5), seed: int = 0, dtype=np.float64) -> np.ndarray:
    return rng(seed).standard_normal(shape).astype(dtype)


CONVS = [(3, 1, 0), (3, 2, 1), (1, 2, 0), (5, 3, 2), ((2, 3), 1, 1)]  # kernel, stride, padding


def conv_args(kernel, dtype=np.float64) -> list:
    kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    r = rng(2)
    return [image(dtype=dtype), r.standard_normal((4, 3, kh, kw)).astype(dtype), r.standard_normal(4).astype(dtype)]


POOLS = [(2, None), (3, 2), (2, 1), (3, 1), (5, None)]  # k, stride: floor sizes, overlaps, the whole image


# Gradients against finite differences (float64) ---------------------------------------------------
@pytest.mark.parametrize("kernel,stride,padding", CONVS)
def test_conv2d_gradients(kernel, stride, padding):
    check_gradients(lambda x, w, b: L.conv2d(x, w, b, stride, padding), L.conv2d_backward, conv_args(kernel))


@pytest.mark.parametrize("k,stride", POOLS)
def test_pooling_gradients(k, stride):
    check_gradients(lambda x: L.max_pool2d(x, k, stride), L.max_pool2d_backward, [image()])
    check_gradients(lambda x: L.avg_pool2d(x, k, stride), L.avg_pool2d_backward, [image()])


@pytest.mark.parametrize("name", ["gelu", "tanh", "sigmoid"])
def test_activation_gradients(name):
    x = image() * 3  # reaches the tails of tanh and sigmoid
    check_gradients(getattr(L, name), getattr(L, f"{name}_backward"), [x])


@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (4, 6)])
def test_layer_norm_gradients(shape):
    r = rng(3)
    args = [image(shape) * 2 + 1, r.standard_normal(shape[1]), r.standard_normal(shape[1])]
    check_gradients(lambda x, g, b: L.layer_norm(x, g, b, 1e-5), L.layer_norm_backward, args)


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout_gradient(p):
    mask = (rng(4).random((2, 3, 5, 5)) > 0.3).astype(np.float64)
    check_gradients(lambda x: L.dropout(x, mask, p), L.dropout_backward, [image()])


def test_flatten_concat_add_gradients():
    check_gradients(L.flatten, L.flatten_backward, [image()])
    for axis in (1, 0, 3):
        parts = [image((2, 3, 3, 3)[:axis] + (c,) + (2, 3, 3, 3)[axis + 1:], seed=c) for c in (1, 3, 2)]
        check_gradients(lambda *xs, axis=axis: L.concat(list(xs), axis), L.concat_backward, parts)
    check_gradients(lambda *xs: L.add(list(xs)), L.add_backward, [image(seed=s) for s in range(3)])


# Forwards ------------------------------------------------------------------------------------------
def test_forwards_by_formula():
    x = image()
    mask = (rng(4).random(x.shape) > 0.5).astype(np.float64)
    assert np.array_equal(L.dropout(x, mask, 0.25)[0], x * (mask / 0.75))  # torch's order
    assert np.array_equal(L.dropout(x, mask, 0.0)[0], x * mask)
    assert not L.dropout(x, mask, 1.0)[0].any()
    assert np.array_equal(L.flatten(x)[0][1], np.concatenate([x[1, c].ravel() for c in range(3)]))  # C, H, W
    assert np.array_equal(L.add([x, 2 * x, 3 * x])[0], x + 2 * x + 3 * x)
    assert np.array_equal(L.concat([x, -x])[0][:, 3:], -x)
    np.testing.assert_allclose(L.avg_pool2d(x, 2)[0], L.avg_pool2(x)[0], rtol=1e-15)
    np.testing.assert_allclose(L.avg_pool2d_backward(x[:, :, :2, :2], L.avg_pool2d(x, 2)[1]),
                               L.avg_pool2_backward(x[:, :, :2, :2], x.shape), rtol=1e-15)
    g = np.linspace(0.5, 2, 3)
    y = L.layer_norm(x, g, -g, 1e-5)[0]
    z = (x - x.mean(axis=(1, 2, 3), keepdims=True)) / np.sqrt(x.var(axis=(1, 2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, z * g[:, None, None] - g[:, None, None], rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError):
        L.dropout(x, mask, 1.5)
    with pytest.raises(ValueError):
        L.max_pool2d(x, 6)


def test_sigmoid_is_stable_for_large_inputs():
    for dtype, big in ((np.float64, 800.0), (np.float32, 100.0)):
        x = np.array([-big, -50, -1, 0, 1, 50, big], dtype)
        with np.errstate(over="raise", invalid="raise", divide="raise"):  # exp(-800) may underflow to 0
            y, cache = L.sigmoid(x)
            dx = L.sigmoid_backward(np.ones_like(x), cache)
        assert y.dtype == dx.dtype == dtype
        assert 0 <= y[0] < 1e-30 and y[-1] == 1 and y[3] == 0.5 and dx[3] == 0.25 and 0 <= dx[0] < 1e-30
        np.testing.assert_allclose(y[[2, 4]], [1 / (1 + np.e), 1 / (1 + 1 / np.e)], rtol=1e-6)
        np.testing.assert_allclose(y[1], np.exp(-50.0), rtol=1e-6)  # small values keep their relative precision
        np.testing.assert_allclose(dx[5], np.exp(-50.0), rtol=1e-6)  # where y rounds to 1, y' is still exact


@pytest.mark.parametrize("kernel,stride,padding", CONVS)
def test_conv2d_matches_torch(kernel, stride, padding):
    torch = pytest.importorskip("torch")
    x, w, b = conv_args(kernel)
    want = torch.nn.functional.conv2d(*map(torch.from_numpy, (x, w, b)), stride=stride, padding=padding).numpy()
    got = L.conv2d(x, w, b, stride, padding)[0]
    assert got.shape == want.shape and rel_err(got, want) < 1e-14


@pytest.mark.parametrize("k,stride", POOLS)
def test_pooling_matches_torch(k, stride):
    torch = pytest.importorskip("torch")
    fn = torch.nn.functional
    x = torch.from_numpy(image()).requires_grad_()
    for ours, back, theirs in ((L.max_pool2d, L.max_pool2d_backward, fn.max_pool2d),
                               (L.avg_pool2d, L.avg_pool2d_backward, fn.avg_pool2d)):
        want = theirs(x, k, stride)
        got, cache = ours(x.detach().numpy(), k, stride)
        assert got.shape == tuple(want.shape) and rel_err(got, want.detach().numpy()) < 1e-15
        dy = torch.from_numpy(rng(5).standard_normal(got.shape))
        (dx,) = torch.autograd.grad(want, x, dy)
        assert rel_err(back(dy.numpy(), cache), dx.numpy()) < 1e-15


def test_activations_match_torch():
    torch = pytest.importorskip("torch")
    x = image() * 4
    t = torch.from_numpy(x)
    for ours, theirs in ((L.gelu, torch.nn.GELU()), (L.tanh, torch.tanh), (L.sigmoid, torch.sigmoid)):
        assert rel_err(ours(x)[0], theirs(t).numpy()) < 1e-15, ours.__name__


@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (4, 6)])
def test_layer_norm_matches_torch(shape):
    """Our (C,) gamma is torch's elementwise weight over (C, H, W) with gamma repeated over H and W."""
    torch = pytest.importorskip("torch")
    r = rng(6)
    x, gamma, beta = image(shape) * 2 + 1, r.standard_normal(shape[1]), r.standard_normal(shape[1])
    tail = (1,) * (len(shape) - 2)
    tx = torch.from_numpy(x).requires_grad_()
    tg, tb = (torch.from_numpy(v).requires_grad_() for v in (gamma, beta))
    want = torch.nn.functional.layer_norm(tx, shape[1:], tg.reshape(-1, *tail).expand(shape[1:]),
                                          tb.reshape(-1, *tail).expand(shape[1:]), 1e-5)
    got, cache = L.layer_norm(x, gamma, beta, 1e-5)
    assert rel_err(got, want.detach().numpy()) < 1e-13
    dy = rng(7).standard_normal(shape)
    theirs = torch.autograd.grad(want, (tx, tg, tb), torch.from_numpy(dy))
    for ours, their in zip(L.layer_norm_backward(dy, cache), theirs):
        assert rel_err(ours, their.numpy()) < 1e-12


# Max-pool ties -------------------------------------------------------------------------------------
def test_max_pool_ties_go_to_the_first_maximum():
    x = np.array([[1.0, 3.0], [3.0, 2.0]])[None, None]  # the maximum twice: (0, 1) comes first row-major
    y, cache = L.max_pool2d(x, 2)
    assert y.item() == 3 and L.max_pool2d_backward(np.ones_like(y), cache)[0, 0].tolist() == [[0, 1], [0, 0]]
    flat = np.zeros((1, 1, 3, 3))  # every window all ties, stride 1: each window's top-left pixel wins
    y, cache = L.max_pool2d(flat, 2, 1)
    dy = np.array([[1.0, 2.0], [4.0, 8.0]])[None, None]
    assert L.max_pool2d_backward(dy, cache)[0, 0].tolist() == [[1, 2, 0], [4, 8, 0], [0, 0, 0]]
    peak = np.zeros((1, 1, 3, 3))
    peak[0, 0, 1, 1] = 1  # one maximum shared by four overlapping windows gets all four gradients
    y, cache = L.max_pool2d(peak, 2, 1)
    assert L.max_pool2d_backward(dy, cache)[0, 0].tolist() == [[0, 0, 0], [0, 15, 0], [0, 0, 0]]


@pytest.mark.parametrize("k,stride", POOLS)
def test_max_pool_ties_as_torch(k, stride):
    torch = pytest.importorskip("torch")
    x = rng(8).integers(0, 3, (2, 3, 5, 5)).astype(np.float64)  # many ties in every window
    tx = torch.from_numpy(x).requires_grad_()
    want = torch.nn.functional.max_pool2d(tx, k, stride)
    got, cache = L.max_pool2d(x, k, stride)
    dy = rng(9).standard_normal(got.shape)
    (dx,) = torch.autograd.grad(want, tx, torch.from_numpy(dy))
    assert np.array_equal(got, want.detach().numpy())
    _, first, _, step = cache  # the winner of each window, as a flat index into the image like torch's indices
    rows = np.arange(got.shape[2])[:, None] * step + first // k
    cols = np.arange(got.shape[3])[None, :] * step + first % k
    _, indices = torch.nn.functional.max_pool2d(tx, k, stride, return_indices=True)
    assert np.array_equal(rows * x.shape[3] + cols, indices.numpy())
    assert rel_err(L.max_pool2d_backward(dy, cache), dx.numpy()) < 1e-15  # overlaps: sums in another order


# dtypes --------------------------------------------------------------------------------------------
def float32_cases():
    x, w, b = conv_args((3, 3), np.float32)
    g = np.linspace(0.5, 2, 3, dtype=np.float32)
    mask = (rng(4).random(x.shape) > 0.5).astype(np.float32)
    return {
        "conv2d": (lambda: L.conv2d(x, w, b, 2, 1), L.conv2d_backward),
        "max_pool2d": (lambda: L.max_pool2d(x, 3, 2), L.max_pool2d_backward),
        "avg_pool2d": (lambda: L.avg_pool2d(x, 3, 2), L.avg_pool2d_backward),
        "gelu": (lambda: L.gelu(x), L.gelu_backward),
        "tanh": (lambda: L.tanh(x), L.tanh_backward),
        "sigmoid": (lambda: L.sigmoid(x), L.sigmoid_backward),
        "layer_norm": (lambda: L.layer_norm(x, g, g, 1e-5), L.layer_norm_backward),
        "dropout": (lambda: L.dropout(x, mask, 0.3), L.dropout_backward),
        "flatten": (lambda: L.flatten(x), L.flatten_backward),
        "concat": (lambda: L.concat([x, x]), L.concat_backward),
        "add": (lambda: L.add([x, x, x]), L.add_backward),
    }


@pytest.mark.parametrize("name", sorted(float32_cases()))
def test_float32_stays_float32(name):
    forward, backward = float32_cases()[name]
    y, cache = forward()
    grads = backward(np.ones_like(y), cache)
    grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
    assert y.dtype == np.float32 and all(g.dtype == np.float32 for g in grads), [g.dtype for g in grads]
