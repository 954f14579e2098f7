"""The reference's layers of any rank and a transformer's token layers, against torch autograd in float64.

Each layer runs as the reference's graph node, so its own hyperparameters
(negative axes, ``Slice.bounds``, ``LayerNorm.last``) reach the arithmetic,
and its output and every gradient (inputs, then parameters) are compared
with torch's functional ops, the definition the model language states its
rules by.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import pytest

from multidev import nn
from multidev.reference import network
from multidev.rules.dropout import shard_masks

torch = pytest.importorskip("torch")
F = torch.nn.functional

TOL = 1e-13  # float64: the same arithmetic in another order


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the largest magnitude of ``want``; absolute at 0."""
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = float(np.max(np.abs(want), initial=0.0))
    return float(np.max(np.abs(got - want), initial=0.0)) / (scale if scale > 0 else 1.0)


def run_node(layer: nn.Layer, xs: list[np.ndarray], params: Optional[dict] = None, train: bool = True,
             mask: Optional[np.ndarray] = None, seed: int = 9):
    """(output, dy, input gradients, parameter gradients by name) of ``layer`` as one reference node."""
    node = network.node("n", layer)
    run = network.Run([{f"n.{k}": v.copy() for k, v in (params or {}).items()}], train=train,
                      masks=None if mask is None else [{"n": mask}])
    y = node.forward(run, [[x] for x in xs])[0]
    dy = np.random.default_rng(seed).standard_normal(y.shape)
    dxs = [parts[0] for parts in node.backward(run, [dy])] if train else []
    return y, dy, dxs, {k[2:]: v for k, v in run.grads[0].items()}


def against_torch(layer: nn.Layer, xs: list[np.ndarray], theirs: Callable, params: Optional[dict] = None,
                  mask: Optional[np.ndarray] = None) -> float:
    """The node's output and gradients against ``theirs(*inputs, **params)``; the node's output shape is the
    layer's ``infer``; returns the largest relative difference."""
    params = params or {}
    y, dy, dxs, grads = run_node(layer, xs, params, mask=mask)
    assert y.shape[1:] == layer.infer("n", [x.shape[1:] for x in xs])
    assert sorted(grads) == sorted(params), (sorted(grads), sorted(params))
    tx = [torch.from_numpy(x).requires_grad_() for x in xs]
    tp = {k: torch.from_numpy(v).requires_grad_() for k, v in params.items()}
    want = theirs(*tx, **tp)
    wanted = torch.autograd.grad(want, tx + list(tp.values()), torch.from_numpy(dy))
    errors = [rel_err(y, want.detach().numpy())]
    errors += [rel_err(g, w.numpy()) for g, w in zip(dxs + [grads[k] for k in tp], wanted)]
    assert y.dtype == np.float64 and all(g.dtype == np.float64 for g in dxs + list(grads.values()))
    assert max(errors) < TOL, errors
    return max(errors)


def normal(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def layer_params(layer: nn.Layer, shape: tuple[int, ...], seed: int = 1) -> dict:
    r = np.random.default_rng(seed)
    return {name: r.standard_normal(s) for name, s, _ in layer.params([shape])}


def sample_index(x, axis: int, index) -> tuple:
    """``index`` on sample axis ``axis`` (negative from the end) of a batched tensor."""
    return (slice(None),) * (axis % (x.dim() - 1) + 1) + (index,)


# Shapes ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,target", [((3, 4, 2), (4, -1)), ((12,), (2, 3, 2)), ((2, 6), (-1,)),
                                          ((4, 3, 2), (2, 2, 3, -1))])
def test_reshape_is_torchs(shape, target):
    against_torch(nn.Reshape(target), [normal(2, *shape)], lambda x: x.reshape(2, *target))


@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 0, 1), (0, 2, 1), (0, 1, 2)])
def test_transpose_is_torchs(perm):
    against_torch(nn.Transpose(perm), [normal(2, 3, 4, 5)], lambda x: x.permute(0, *(p + 1 for p in perm)))


SLICES = [nn.Slice(0, 0, 1), nn.Slice(0, 1, None, 2), nn.Slice(-1, 1, None, 2), nn.Slice(1, -3, -1),
          nn.Slice(-2, 0, 5, 3), nn.Slice(2, -10, 100, 4), nn.Slice(-1, 4)]


@pytest.mark.parametrize("layer", SLICES, ids=str)
def test_slice_is_torchs_with_steps_and_negative_axes(layer):
    against_torch(layer, [normal(2, 5, 4, 6)], lambda x: x[sample_index(x, layer.axis,
                                                                          slice(layer.start, layer.stop, layer.step))])


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_concat_on_any_axis_is_torchs(axis):
    shapes = [[3, 4, 5], [3, 4, 5]]
    shapes[1][axis] = 2
    xs = [normal(2, *shapes[0], seed=1), normal(2, *shapes[1], seed=2)]
    against_torch(nn.Concat(axis=axis), xs, lambda a, b: torch.cat([a, b], dim=axis % 3 + 1))


def test_flatten_of_tokens_is_torchs():
    against_torch(nn.Flatten(), [normal(2, 3, 4, 5)], lambda x: x.flatten(1))


# Products, softmax, scale ----------------------------------------------------------------------------
def _torch_matmul(a, b):
    """Both samples at one rank first (1s after the batch axis), as the model language broadcasts them."""
    rank = max(a.dim(), b.dim())
    return a.reshape(len(a), *(1,) * (rank - a.dim()), *a.shape[1:]) @ \
        b.reshape(len(b), *(1,) * (rank - b.dim()), *b.shape[1:])


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 5)),
                                 ((3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (1, 3, 4, 2))])
def test_matmul_broadcasts_leading_axes_as_torch(a, b):
    against_torch(nn.MatMul(), [normal(2, *a, seed=1), normal(2, *b, seed=2)], _torch_matmul)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_on_each_axis_is_torchs(axis):
    x = 3 * normal(2, 3, 4, 5)
    against_torch(nn.Softmax(axis), [x], lambda t: torch.softmax(t, dim=axis % 3 + 1))


def test_softmax_of_large_values_does_not_overflow():
    y = run_node(nn.Softmax(-1), [np.array([[1000.0, 0.0, -1000.0]])])[0]
    assert np.allclose(y, [[1.0, 0.0, 0.0]])


def test_scale_is_torchs():
    against_torch(nn.Scale(0.125), [normal(2, 3, 4)], lambda x: x * 0.125)


def test_dense_on_tokens_is_torchs():
    layer, shape = nn.Dense(5), (3, 4)
    against_torch(layer, [normal(2, *shape)], lambda x, weight, bias: F.linear(x, weight, bias),
                  layer_params(layer, shape))
    layer, shape = nn.Dense(2, bias=False), (2, 2, 3, 4)  # (C, H, W) images are refused, any other rank runs
    against_torch(layer, [normal(2, *shape)], lambda x, weight: F.linear(x, weight), layer_params(layer, shape))


# LayerNorm -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("last,affine,shape", [(1, True, (3, 4)), (1, False, (3, 4)), (2, True, (2, 3, 4)),
                                               (2, False, (2, 3, 4)), (3, True, (2, 3, 4)), (1, True, (5,))])
def test_layer_norm_over_the_last_axes_is_torchs(last, affine, shape):
    layer = nn.LayerNorm(eps=1e-6, last=last, affine=affine)
    assert layer.axes(shape) == tuple(range(len(shape) - last, len(shape)))

    def theirs(x, gamma=None, beta=None):
        return F.layer_norm(x, shape[-last:], gamma, beta, 1e-6)
    against_torch(layer, [2 * normal(3, *shape) + 1], theirs, layer_params(layer, shape))


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_of_whole_tokens_is_per_channel(affine):
    """``last`` None on tokens (L, D): statistics over the whole sample, one gamma and beta per token."""
    layer, shape = nn.LayerNorm(affine=affine), (3, 4)

    def theirs(x, gamma=None, beta=None):
        expand = (lambda v: v[:, None].expand(shape)) if affine else (lambda v: None)
        return F.layer_norm(x, shape, expand(gamma), expand(beta), 1e-5)
    against_torch(layer, [normal(2, *shape)], theirs, layer_params(layer, shape))


# Tokens ----------------------------------------------------------------------------------------------
def test_class_token_is_prepended_to_every_sample():
    layer, shape = nn.ClassToken(), (3, 4)
    against_torch(layer, [normal(2, *shape)], lambda x, token: torch.cat([token.expand(2, 1, 4), x], dim=1),
                  layer_params(layer, shape))


def test_position_embedding_is_added_to_every_sample():
    layer, shape = nn.PositionEmbedding(), (3, 4)
    against_torch(layer, [normal(2, *shape)], lambda x, embedding: x + embedding, layer_params(layer, shape))


def _torch_attention(dim: int, heads: int, bias: bool) -> Callable:
    """torch's nn.MultiheadAttention with the reference's weights: ``theirs(x, **params)``."""
    def theirs(x, in_weight, out_weight, in_bias=None, out_bias=None):
        module = torch.nn.MultiheadAttention(dim, heads, bias=bias, batch_first=True, dtype=torch.float64)
        del module.in_proj_weight, module.out_proj.weight  # our tensors in their place, so autograd reaches them
        module.in_proj_weight, module.out_proj.weight = in_weight, out_weight
        if bias:
            del module.in_proj_bias, module.out_proj.bias
            module.in_proj_bias, module.out_proj.bias = in_bias, out_bias
        return module(x, x, x)[0]
    return theirs


@pytest.mark.parametrize("length,dim,heads,bias", [(5, 8, 2, True), (5, 8, 4, False), (3, 6, 1, True),
                                                   (4, 6, 3, True)])
def test_multi_head_attention_is_torchs(length, dim, heads, bias):
    layer, shape = nn.MultiHeadAttention(heads, bias=bias), (length, dim)
    params = layer_params(layer, shape)
    assert (len(params) == 4) == bias
    against_torch(layer, [normal(3, *shape)], _torch_attention(dim, heads, bias), params)


def test_attention_written_out_is_the_whole_layer():
    """One head of MultiHeadAttention equals Dense, MatMul, Scale and Softmax nodes chained by hand."""
    x, dim = normal(2, 4, 6), 6
    params = layer_params(nn.MultiHeadAttention(1), (4, dim))
    whole = run_node(nn.MultiHeadAttention(1), [x], params)[0]
    w, b = params["in_weight"], params["in_bias"]
    q, k, v = (run_node(nn.Dense(dim), [x], {"weight": w[i * dim:(i + 1) * dim], "bias": b[i * dim:(i + 1) * dim]})[0]
               for i in range(3))
    scores = run_node(nn.Scale(1 / math.sqrt(dim)), [run_node(nn.MatMul(), [q, k.transpose(0, 2, 1)])[0]])[0]
    mixed = run_node(nn.MatMul(), [run_node(nn.Softmax(-1), [scores])[0], v])[0]
    out = run_node(nn.Dense(dim), [mixed], {"weight": params["out_weight"], "bias": params["out_bias"]})[0]
    assert rel_err(whole, out) < TOL


# DropPath --------------------------------------------------------------------------------------------
def test_drop_path_multiplies_whole_samples_by_the_cores_masks():
    layer, shape = nn.DropPath(0.5), (3, 4)
    mask = shard_masks([("n", layer.p, layer.mask_shape(shape))], 0, 1, 1, 0, [6], np.float64)["n"][0]
    assert mask.shape == (6, 1, 1) and {0.0, 2.0} == set(mask.ravel())
    against_torch(layer, [normal(6, *shape)], lambda x: x * torch.from_numpy(mask), mask=mask)


def test_drop_path_is_the_identity_in_inference():
    x = normal(2, 3, 4)
    assert run_node(nn.DropPath(0.5), [x], train=False)[0] is x
