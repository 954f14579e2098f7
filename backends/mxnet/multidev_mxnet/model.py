"""Any ``multidev.nn`` definition as one Gluon network, with the core's canonical names.

The graph's nodes run in order inside one ``HybridBlock``; a node with
parameters is Gluon's own layer (``nn.Conv2D``, padded as :mod:`.windows`
says, ``nn.Dense`` on the last axis, the engine's BatchNorm, a LayerNorm,
the token layers of :mod:`.tokens`), registered
as a child under the node's name (``stage1.block1.conv1``), so Gluon's
structured names (those ``save_parameters`` writes) are the canonical ones:
``stage1.block1.conv1.weight``.
MXNet's layouts are the canonical ones (OIHW convolutions, (out, in) dense,
NCHW flattened in C, H, W order), so loading a state is a copy with no
transposes. The layers without parameters are MXNet operators (those that
rearrange values or multiply activations: :mod:`.shapes`).

Dropout multiplies its input by the core's mask, an input of the network
(one per Dropout node, in graph order): MXNet's own Dropout draws its own
masks, which no other engine could repeat. Inference passes masks of ones.
DropPath's masks hold one value per sample, broadcast over its values.
"""

from __future__ import annotations

import json
import operator
import warnings
from collections.abc import Callable
from functools import reduce
from typing import Optional

import numpy as np

from multidev import nn as mnn  # the model language; `nn` is Gluon's
from multidev.engine import ModelSpec, MultidevError

from . import onednn, tokens, windows
from .batchnorm import BatchNorm, StatsExchange
from .rows import fixed_rows
from .runtime import mxnet
from .shapes import concat, matmul, pad, reshape, softmax, take, transpose

mx = mxnet()

nn = mx.gluon.nn


class LayerNorm(nn.HybridBlock):
    """The language's LayerNorm (biased variance): over all of a sample's values with a scale and shift per channel
    (or feature), or over its last k axes with one per value of those.

    Over the last axes with a scale and shift it is MXNet's LayerNorm, which
    normalises one axis: those axes merged into one, and split again after.
    The rest (one scale per channel; none) are plain ops, whose gradients
    autograd derives: neither MXNet's LayerNorm nor its GroupNorm (1.9.1: one
    scale per group) takes them. In float32 (not ``exact``) the former is
    :func:`.onednn.layer_norm`, whose sums run on oneDNN.
    """

    def __init__(self, layer: mnn.LayerNorm, shape: tuple[int, ...], exact: bool = True) -> None:
        super().__init__()
        self.eps, self.fused = layer.eps, layer.affine and layer.last is not None
        self.units = int(np.prod(shape[-layer.last:])) if self.fused else 0
        self.axes = tuple(a + 1 for a in layer.axes(shape))  # MXNet's: the batch axis first
        size = (shape[0],) if layer.last is None else tuple(shape[-layer.last:])
        # over a whole sample, the scale's shape against (N, *shape): (1, C, 1, 1) for images, (1, F) for features
        self.broadcast = (1, shape[0]) + (1,) * (len(shape) - 1)
        self.merged = (0,) * (len(shape) + 1 - len(self.axes)) + (-1,)  # the normalised axes as one
        if layer.affine:
            with self.name_scope():
                self.gamma = self.params.get("gamma", shape=size, init=mx.init.One())
                self.beta = self.params.get("beta", shape=size, init=mx.init.Zero())
                if self.fused and not exact:
                    self.mean, self.spread = onednn.layer_norm_constants(self.params, self.units)

    def hybrid_forward(self, F, x, gamma=None, beta=None, mean=None, spread=None):
        if self.fused:
            flat = F.reshape(x, shape=self.merged) if len(self.axes) > 1 else x
            if mean is not None:
                out = onednn.layer_norm(F, flat, gamma, beta, mean, spread, self.eps, self.units)
            else:
                out = F.LayerNorm(flat, F.reshape(gamma, shape=(-1,)), F.reshape(beta, shape=(-1,)), axis=-1,
                                  eps=self.eps)
            return F.reshape_like(out, x) if len(self.axes) > 1 else out
        centred = F.broadcast_sub(x, F.mean(x, axis=self.axes, keepdims=True))
        var = F.mean(F.square(centred), axis=self.axes, keepdims=True)
        xhat = F.broadcast_mul(centred, F.rsqrt(var + self.eps))
        if gamma is None:
            return xhat
        return F.broadcast_add(F.broadcast_mul(xhat, F.reshape(gamma, shape=self.broadcast)),
                               F.reshape(beta, shape=self.broadcast))


def _layer_block(layer: mnn.Layer, shape: tuple[int, ...], sync: bool, exact: bool, rows: Optional[int]):
    """Gluon's block for a layer with parameters (``shape``: its input's, per sample); None for the rest;
    ``exact``: float64's forms; ``rows``: those the network is compiled for (:mod:`.rows`), or None."""
    if isinstance(layer, mnn.Conv2d):
        return windows.Conv2D(layer, shape)
    if isinstance(layer, mnn.Dense):
        return nn.Dense(layer.out_features, use_bias=layer.bias, flatten=False, in_units=shape[-1])  # last axis
    if isinstance(layer, mnn.BatchNorm):
        return BatchNorm(shape[0], sync, layer.eps, layer.momentum)
    if isinstance(layer, mnn.LayerNorm):
        return LayerNorm(layer, shape, exact)
    return tokens.block(layer, shape, rows)


def _gelu(F, layer, xs, shapes):
    """GELU's tanh form as written (autograd's gradient is exact); its exact form x * Phi(x), with the exact
    gradient Phi(x) + x * phi(x).

    MXNet 1.9.1 has no exact GELU to take in float64: ``LeakyReLU(act_type="gelu")``
    is 1e-7 off erf's form and ``erf``'s gradient 3e-8 off, even in float64
    (measured). So Phi is held fixed and the term x * phi(x) comes from
    phi(x)'s own gradient (phi' = -x phi): ``stop(phi) - phi`` is 0, with
    gradient x * phi(x). In float32, whose own rounding is that size, the
    network takes the fused operator instead (:func:`_fused_gelu`): this
    composition's erf and exp were 12 of a ViT step's 103 ms (batch 32).
    """
    x = xs[0]
    if layer.approximate == "tanh":
        inner = float(np.sqrt(2 / np.pi)) * (x + 0.044715 * x * F.square(x))
        return 0.5 * x * (1.0 + F.tanh(inner))
    cdf = 0.5 * F.erf(x * float(1 / np.sqrt(2))) + 0.5
    pdf = F.exp(-0.5 * F.square(x)) * float(1 / np.sqrt(2 * np.pi))
    return x * F.stop_gradient(cdf) + (F.stop_gradient(pdf) - pdf)


def _fused_gelu(F, layer, xs, shapes):
    """float32's GELU: erf's form as MXNet's fused operator (within float32's rounding of it); the tanh form as
    :func:`_gelu` writes it."""
    if layer.approximate == "tanh":
        return _gelu(F, layer, xs, shapes)
    return F.LeakyReLU(xs[0], act_type="gelu")


def _aligned(F, xs, shapes):
    """NumPy's broadcasting of the samples: an input of fewer axes gets ones after the batch axis first."""
    rank = max(map(len, shapes))
    return [x if len(shape) == rank else F.reshape(x, shape=(0, *(1,) * (rank - len(shape)), *shape))
            for x, shape in zip(xs, shapes)]


def _clip(F, x, low: float, high: float):
    """clip(x, low, high) whose gradient flows strictly inside the bounds, as torch's hardtanh, ``jax.nn.relu6`` and
    the reference; NaN passes.

    MXNet's ``clip`` passes it at both bounds, and ``maximum`` and ``minimum``
    hand a tie's gradient to their first operand: the bounds go first.
    """
    zeros = F.zeros_like(x)
    return F.maximum(zeros + low, F.minimum(zeros + high, x))


def _hard_sigmoid(F, x):
    """torch's clip(x / 6 + 1/2, 0, 1): scalars in double (``hard_sigmoid``'s alpha is a float32 1/6)."""
    return _clip(F, x / 6.0 + 0.5, 0.0, 1.0)


#: the layers without parameters: (F, layer, inputs, their shapes per sample) -> output; float64's (exact) forms
_FUNCTIONS: dict[type, Callable] = {
    mnn.ReLU: lambda F, layer, xs, shapes: F.Activation(xs[0], act_type="relu"),  # oneDNN's, which keeps its layout
    mnn.GELU: _gelu,
    mnn.Tanh: lambda F, layer, xs, shapes: F.tanh(xs[0]),
    mnn.Sigmoid: lambda F, layer, xs, shapes: F.sigmoid(xs[0]),
    mnn.ReLU6: lambda F, layer, xs, shapes: _clip(F, xs[0], 0.0, 6.0),
    mnn.LeakyReLU: lambda F, layer, xs, shapes: F.LeakyReLU(xs[0], act_type="leaky", slope=layer.negative_slope),
    mnn.SiLU: lambda F, layer, xs, shapes: xs[0] * F.sigmoid(xs[0]),
    mnn.HardSigmoid: lambda F, layer, xs, shapes: _hard_sigmoid(F, xs[0]),
    mnn.HardSwish: lambda F, layer, xs, shapes: xs[0] * _hard_sigmoid(F, xs[0]),
    mnn.MaxPool2d: lambda F, layer, xs, shapes: windows.pool(F, layer, xs[0], shapes[0]),
    mnn.AvgPool2d: lambda F, layer, xs, shapes: windows.pool(F, layer, xs[0], shapes[0]),
    mnn.GlobalAvgPool: lambda F, layer, xs, shapes: F.mean(xs[0], axis=(2, 3), keepdims=layer.keepdims),
    mnn.Flatten: lambda F, layer, xs, shapes: F.reshape(xs[0], shape=(0, -1)),  # C, H, W order; features as they are
    mnn.Add: lambda F, layer, xs, shapes: reduce(operator.add, xs),
    mnn.Mul: lambda F, layer, xs, shapes: reduce(F.broadcast_mul, _aligned(F, xs, shapes)),
    mnn.Sub: lambda F, layer, xs, shapes: F.broadcast_sub(*_aligned(F, xs, shapes)),
    mnn.Div: lambda F, layer, xs, shapes: F.broadcast_div(*_aligned(F, xs, shapes)),
    mnn.Concat: concat,
    mnn.Reshape: reshape,
    mnn.Transpose: transpose,
    mnn.Slice: take,
    mnn.Pad: pad,
    mnn.Mean: lambda F, layer, xs, shapes: F.mean(xs[0], axis=layer.batched(len(shapes[0])), keepdims=layer.keepdims),
    mnn.MatMul: matmul,
    mnn.Softmax: softmax,
    mnn.Scale: lambda F, layer, xs, shapes: xs[0] * layer.factor,
}

#: float32's own forms (:mod:`.onednn`), within float32's rounding of the exact ones
_FLOAT32: dict[type, Callable] = {
    mnn.GELU: _fused_gelu,
    mnn.ReLU6: onednn.relu6,
    mnn.GlobalAvgPool: onednn.global_avg_pool,
}


class Network(nn.HybridBlock):
    """A definition's graph: ``net(x, *masks)``, one mask per Dropout node in graph order (ones in inference)."""

    def __init__(self, spec: ModelSpec, sync: bool, exact: bool = False, rows: Optional[int] = None) -> None:
        super().__init__()
        self.nodes, self.in_shape = spec.graph.nodes, spec.in_shape
        self.functions = _FUNCTIONS if exact else {**_FUNCTIONS, **_FLOAT32}
        self.shapes = shapes = spec.graph.shapes(spec.in_shape)  # per sample, by node name
        #: the rows every call computes (:mod:`.rows`: shorter shards padded to it, longer ones in pieces), or None
        self.rows = fixed_rows(spec, shapes, exact, rows)
        self.flat = {n.name for n in self.nodes if len(shapes[n.inputs[0]]) == 1}  # nodes whose input is (N, F)
        self.dropouts = [name for name, _, _ in spec.dropouts()]
        self.mask_shapes = [shape for _, _, shape in spec.dropouts()]
        with self.name_scope():
            for node in self.nodes:
                block = _layer_block(node.layer, shapes[node.inputs[0]], sync, exact, self.rows)
                if block is not None:
                    self.register_child(block, node.name)  # the structured name is the node's
                elif type(node.layer) not in self.functions and not isinstance(node.layer, mnn.Dropout):
                    raise MultidevError(f"the mxnet engine has no {type(node.layer).__name__} (node {node.name!r})")

    def ones(self, rows: int, ctx, dtype) -> list:
        """Masks that keep everything: what inference passes for the Dropout inputs."""
        return [mx.nd.ones((rows, *shape), ctx=ctx, dtype=dtype) for shape in self.mask_shapes]

    def example(self, ctx, dtype) -> list:
        """Inputs of two rows, or the rows it is compiled for (zeros, masks of ones): what :func:`trace` calls a
        network with."""
        rows = self.rows or 2
        return [mx.nd.zeros((rows, *self.in_shape), ctx=ctx, dtype=dtype), *self.ones(rows, ctx, dtype)]

    def hybrid_forward(self, F, x, *masks):
        values, masks = {"input": x}, dict(zip(self.dropouts, masks))
        for node in self.nodes:
            values[node.name] = self._node(F, node, [values[i] for i in node.inputs], masks)
        return values[self.nodes[-1].name]

    def _node(self, F, node, xs: list, masks: dict):
        layer = node.layer
        if isinstance(layer, mnn.Dropout):  # DropPath's masks, one value per sample, broadcast over its values
            each = self.mask_shapes[self.dropouts.index(node.name)] == self.shapes[node.inputs[0]]  # one per value
            return xs[0] * masks[node.name] if each else F.broadcast_mul(xs[0], masks[node.name])
        if type(layer) in self.functions:
            return self.functions[type(layer)](F, layer, xs, [self.shapes[i] for i in node.inputs])
        block = self._children[node.name]
        if isinstance(layer, mnn.BatchNorm) and node.name in self.flat:  # features as (N, F, 1, 1) images
            return F.reshape(block(F.reshape(xs[0], shape=(0, 0, 1, 1))), shape=(0, 0))
        return block(xs[0])


def build(spec: ModelSpec, sync: bool = False, exact: bool = False, rows: Optional[int] = None) -> Network:
    """The network; ``sync`` gives its BatchNorm layers what whole-batch statistics need; ``exact`` (float64, the
    truth) takes each layer's exact form where MXNet's fused one is only float32's; ``rows``: a full shard's,
    which a network with attention is compiled for where it can be (:func:`.rows.fixed_rows`)."""
    return Network(spec, sync, exact, rows)


def canonical_params(net: nn.Block, spec: ModelSpec) -> dict:
    """Canonical name -> Gluon Parameter, from the structured names Gluon itself saves under."""
    structured = net._collect_params_with_prefix()  # also holds sync BatchNorm's constants
    missing = [p.name for p in spec.params() if p.name not in structured]
    if missing:
        raise RuntimeError(f"the Gluon {spec.name} lacks canonical parameters {missing[:3]}")
    return {p.name: structured[p.name] for p in spec.params()}


def batchnorms(net: nn.Block) -> list[BatchNorm]:
    found: list[BatchNorm] = []
    net.apply(lambda b: found.append(b) if isinstance(b, BatchNorm) else None)
    return found


def contains_batchnorm(block: nn.Block) -> bool:
    return bool(batchnorms(block))


def hybridize(block: nn.Block, around_batchnorm: bool) -> None:
    """Compile the whole network; ``around_batchnorm``, the largest pieces that hold no BatchNorm.

    Sync BatchNorm exchanges statistics between threads in Python, and a
    float64 one blends its running statistics in Python, which a compiled
    graph cannot do; the layers around it still run compiled.
    """
    if not (around_batchnorm and contains_batchnorm(block)):
        if isinstance(block, nn.HybridBlock):
            block.hybridize(static_alloc=True)
        return
    for child in block._children.values():
        hybridize(child, around_batchnorm)


def trace(net: nn.Block, inputs: list, sync: bool) -> None:
    """Build the compiled graphs with one call, before any threads use them.

    Gluon builds a hybridized block's graph on its first call, and that step is
    not thread-safe (it races on the name scope); running a built one is. Under
    sync BatchNorm the call is a training-mode one through a one-context
    exchange, so the exchange's own graphs are built too; its statistics are
    dropped, so the running statistics stay untouched. ``inputs``: from
    :meth:`Network.example`.
    """
    if not sync:
        net(*inputs).wait_to_read()
        return
    layers = batchnorms(net)
    for bn in layers:
        bn.exchange = StatsExchange([inputs[0].context])
    try:
        with mx.autograd.record():
            out = net(*inputs)
        out.wait_to_read()
    finally:
        for bn in layers:
            bn.exchange, bn.batch_statistics = None, None


def bfloat16(net: nn.HybridBlock) -> nn.HybridBlock:
    """``net``'s compiled graph with convolutions and dense layers in bfloat16, on ``net``'s float32 parameters.

    contrib.amp inserts casts to bfloat16 before Convolution and
    FullyConnected (BatchNorm stays float32, as its statistics need); the
    block shares ``net``'s Parameter objects, so gradients, updates and the
    optimizer's state stay float32. Each parameter enters through an
    ``identity``: MXNet 1.9.1's ``amp_cast`` to bfloat16 ignores
    ``grad_req="add"`` (the gradient stays 0), while the identity honours it.
    The FullyConnected ops that compute statistics (LayerNorm's, the global pooling's) stay float32.
    """
    from mxnet.contrib import amp

    inputs, sym = net._cached_graph
    data = [i.name for i in inputs]
    params = [name for name in sym.list_arguments() if name not in data]
    sym = sym(**{name: mx.sym.identity(mx.sym.var(name), name=f"{name}_in") for name in params})
    statistics = [node["name"] for node in json.loads(sym.tojson())["nodes"] if onednn.KEEP_FLOAT32 in node["name"]]
    converted = amp.convert_symbol(sym, "bfloat16", data_names=data, excluded_sym_names=statistics,
                                   fp32_ops=amp.list_fp32_ops(amp.amp.bfloat16) + ["BatchNorm"])
    with warnings.catch_warnings():  # it cannot tell the data's type before a call: float32, as the casts say
        warnings.filterwarnings("ignore", "Cannot decide type", UserWarning)
        block = nn.SymbolBlock(converted, inputs, params=net.collect_params())
    block.hybridize(static_alloc=True)
    return block
