"""Any ``multidev.nn`` definition run forward and backward in NumPy, on simulated devices in lockstep.

The replicas run in lockstep: each node runs on every device's shard before
the next node starts, so an activation is a list with one array per device.
That is how SPMD programs run on real devices, and it gives the one layer
that exchanges data between devices (sync BatchNorm) every device's values
at the moment it needs them, without threads. Each device computes with its
own copy of the parameters (``Run.params``), never device 0's.

Parameters live in plain dicts under their canonical names
(``ModelSpec.params()``), so the state, a checkpoint and the gradients are
the same dict shape with no renaming.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn import layers as nn
from multidev.nn.graph import Graph
from multidev.reference import layers, tokens
from multidev.reference.batchnorm import BatchNorm
from multidev.rules.models import ModelSpec, State

Arrays = list[np.ndarray]  # one array per device


@dataclass
class Run:
    """One forward (and backward) pass over the active devices: device i uses ``params[i]``.

    ``masks``: training only, device i's Dropout multipliers by node name (``multidev.rules.dropout``).
    """

    params: list[State]
    train: bool
    sync: bool = False           # BatchNorm over the whole minibatch
    update_stats: bool = True    # BatchNorm running statistics (off when only gradients are asked for)
    masks: Optional[list[dict[str, np.ndarray]]] = None
    grads: list[State] = field(init=False)  # device i's gradients, filled in by the backward pass

    def __post_init__(self) -> None:
        self.grads = [{} for _ in self.params]


class Node:
    """One layer of the graph on every device: forward keeps what backward needs, per device."""

    def __init__(self, name: str, layer: nn.Layer) -> None:
        self.name, self.layer, self.saved = name, layer, []

    def forward(self, run: Run, inputs: list[Arrays]) -> Arrays:
        outs = [self.one(run, d, [xs[d] for xs in inputs]) for d in range(len(run.params))]
        self.saved = [cache for _, cache in outs]
        return [y for y, _ in outs]

    def backward(self, run: Run, dys: Arrays) -> list[Arrays]:
        """The gradient of each input (one list per input, one array per device)."""
        per_device = [self.back(run.grads[d], dy, cache) for d, (dy, cache) in enumerate(zip(dys, self.saved))]
        self.saved = []  # free the activations as soon as they are used
        return [list(parts) for parts in zip(*per_device)]

    def one(self, run: Run, d: int, xs: Arrays) -> tuple[np.ndarray, object]:
        raise NotImplementedError

    def back(self, g: State, dy: np.ndarray, cache) -> list[np.ndarray]:
        raise NotImplementedError


class Conv(Node):
    def one(self, run, d, xs):
        p, lay = run.params[d], self.layer
        b = p[f"{self.name}.bias"] if lay.bias else None
        return layers.conv2d(xs[0], p[f"{self.name}.weight"], b, lay.stride, lay.sides(xs[0].shape[1:]), lay.groups,
                             lay.dilation)

    def back(self, g, dy, cache):
        dx, g[f"{self.name}.weight"], db = layers.conv2d_backward(dy, cache)
        if self.layer.bias:
            g[f"{self.name}.bias"] = db
        return [dx]


class Dense(Node):
    def one(self, run, d, xs):
        p = run.params[d]
        b = p[f"{self.name}.bias"] if self.layer.bias else np.zeros((), xs[0].dtype)
        return layers.dense(xs[0], p[f"{self.name}.weight"], b)

    def back(self, g, dy, cache):
        dx, g[f"{self.name}.weight"], db = layers.dense_backward(dy, cache)
        if self.layer.bias:
            g[f"{self.name}.bias"] = db
        return [dx]


class LayerNorm(Node):
    def one(self, run, d, xs):
        p, lay = run.params[d], self.layer
        gamma, beta = (p[f"{self.name}.gamma"], p[f"{self.name}.beta"]) if lay.affine else (None, None)
        return layers.layer_norm(xs[0], gamma, beta, lay.eps, lay.last)

    def back(self, g, dy, cache):
        dx, dgamma, dbeta = layers.layer_norm_backward(dy, cache)
        if self.layer.affine:
            g[f"{self.name}.gamma"], g[f"{self.name}.beta"] = dgamma, dbeta
        return [dx]


class ClassToken(Node):
    def one(self, run, d, xs):
        return tokens.class_token(xs[0], run.params[d][f"{self.name}.token"])

    def back(self, g, dy, cache):
        dx, g[f"{self.name}.token"] = tokens.class_token_backward(dy, cache)
        return [dx]


class PositionEmbedding(Node):
    def one(self, run, d, xs):
        return tokens.position_embedding(xs[0], run.params[d][f"{self.name}.embedding"])

    def back(self, g, dy, cache):
        dx, g[f"{self.name}.embedding"] = tokens.position_embedding_backward(dy, cache)
        return [dx]


class MultiHeadAttention(Node):
    """Parameters ``in_weight``, ``in_bias``, ``out_weight``, ``out_bias`` (the biases only with ``bias``)."""

    def one(self, run, d, xs):
        p, name, bias = run.params[d], self.name, self.layer.bias
        return tokens.attention(xs[0], p[f"{name}.in_weight"], p[f"{name}.in_bias"] if bias else None,
                                p[f"{name}.out_weight"], p[f"{name}.out_bias"] if bias else None, self.layer.heads)

    def back(self, g, dy, cache):
        dx, din_w, din_b, dout_w, dout_b = tokens.attention_backward(dy, cache)
        g[f"{self.name}.in_weight"], g[f"{self.name}.out_weight"] = din_w, dout_w
        if self.layer.bias:
            g[f"{self.name}.in_bias"], g[f"{self.name}.out_bias"] = din_b, dout_b
        return [dx]


class WindowAttention(Node):
    """:class:`MultiHeadAttention`'s parameters and ``table``, the relative position bias."""

    def one(self, run, d, xs):
        p, name, lay = run.params[d], self.name, self.layer
        return tokens.window_attention(xs[0], p[f"{name}.in_weight"], p[f"{name}.in_bias"] if lay.bias else None,
                                       p[f"{name}.out_weight"], p[f"{name}.out_bias"] if lay.bias else None,
                                       p[f"{name}.table"], lay.heads, lay.window, lay.shift)

    def back(self, g, dy, cache):
        dx, din_w, din_b, dout_w, dout_b, g[f"{self.name}.table"] = tokens.window_attention_backward(dy, cache)
        g[f"{self.name}.in_weight"], g[f"{self.name}.out_weight"] = din_w, dout_w
        if self.layer.bias:
            g[f"{self.name}.in_bias"], g[f"{self.name}.out_bias"] = din_b, dout_b
        return [dx]


class Dropout(Node):
    """Inverted dropout with the core's multipliers; the identity in inference.

    DropPath's multipliers are one per sample, (n, 1, ..., 1): they broadcast over the sample's values.
    """

    def one(self, run, d, xs):
        if not run.train:
            return xs[0], None
        if run.masks is None:
            raise MultidevError(f"Dropout {self.name!r} runs in training without the core's masks "
                                f"(multidev.rules.dropout.shard_masks)")
        m = run.masks[d][self.name].astype(xs[0].dtype, copy=False)
        return xs[0] * m, m

    def back(self, g, dy, m):
        return [dy if m is None else dy * m]


class Function(Node):
    """A layer without parameters, from a forward and a backward function of ``layers``."""

    def __init__(self, name: str, layer: nn.Layer, forward: Callable, backward: Callable, many: bool = False):
        super().__init__(name, layer)
        self._forward, self._backward, self.many = forward, backward, many

    def one(self, run, d, xs):
        return self._forward(xs) if self.many else self._forward(xs[0])

    def back(self, g, dy, cache):
        dx = self._backward(dy, cache)
        return list(dx) if self.many else [dx]


def _max_pool(lay: nn.MaxPool2d):
    """The layer's padding and ceil_mode made concrete at each input's size (``multidev.nn.windows``' rule)."""
    def forward(x: np.ndarray):
        shape = x.shape[1:]
        return layers.max_pool2d(x, lay.kernel_size, lay.step, lay.sides(shape), lay.ceil_extra(shape))
    return forward, layers.max_pool2d_backward


def _slice(lay: nn.Slice):
    """The slice's bounds resolved at each input's size (``Slice.bounds``: Python's rule)."""
    def forward(x: np.ndarray):
        return layers.slice_axis(x, *lay.bounds(x.shape[1:]))
    return forward, layers.slice_axis_backward


def _pad(lay: nn.Pad):
    def forward(x: np.ndarray):
        return layers.pad_axis(x, lay.axis % (x.ndim - 1), lay.before, lay.after, lay.value)
    return forward, layers.pad_axis_backward


def _mean(lay: nn.Mean):
    def forward(x: np.ndarray):
        return layers.mean_axes(x, lay.batched(x.ndim - 1), lay.keepdims)
    return forward, layers.mean_axes_backward


def _concat(lay: nn.Concat):
    """The layer's sample axis as an axis of the batched arrays (one past it)."""
    return lambda xs: layers.concat(xs, lay.axis % (xs[0].ndim - 1) + 1), layers.concat_backward


def _softmax(lay: nn.Softmax):
    return lambda x: layers.softmax(x, lay.axis % (x.ndim - 1) + 1), layers.softmax_backward


def _avg_pool(lay: nn.AvgPool2d):
    def forward(x: np.ndarray):
        shape = x.shape[1:]
        return layers.avg_pool2d(x, lay.kernel_size, lay.step, lay.sides(shape), lay.ceil_extra(shape),
                                 lay.count_include_pad)
    return forward, layers.avg_pool2d_backward


_FUNCTIONS: dict[type, Callable[[nn.Layer], tuple[Callable, Callable]]] = {
    nn.ReLU: lambda lay: (layers.relu, layers.relu_backward),
    nn.ReLU6: lambda lay: (layers.relu6, layers.relu6_backward),
    nn.LeakyReLU: lambda lay: (lambda x: layers.leaky_relu(x, lay.negative_slope), layers.leaky_relu_backward),
    nn.GELU: lambda lay: (lambda x: layers.gelu(x, lay.approximate), layers.gelu_backward),
    nn.SiLU: lambda lay: (layers.silu, layers.silu_backward),
    nn.HardSigmoid: lambda lay: (layers.hard_sigmoid, layers.hard_sigmoid_backward),
    nn.HardSwish: lambda lay: (layers.hard_swish, layers.hard_swish_backward),
    nn.Tanh: lambda lay: (layers.tanh, layers.tanh_backward),
    nn.Sigmoid: lambda lay: (layers.sigmoid, layers.sigmoid_backward),
    nn.MaxPool2d: _max_pool,
    nn.AvgPool2d: _avg_pool,
    nn.GlobalAvgPool: lambda lay: (lambda x: layers.global_avg_pool(x, lay.keepdims), layers.global_avg_pool_backward),
    nn.Flatten: lambda lay: (layers.flatten, layers.flatten_backward),
    nn.Reshape: lambda lay: (lambda x: layers.reshape(x, lay.shape), layers.reshape_backward),
    nn.Transpose: lambda lay: (lambda x: layers.transpose(x, lay.perm), layers.transpose_backward),
    nn.Slice: _slice,
    nn.Pad: _pad,
    nn.Mean: _mean,
    nn.Softmax: _softmax,
    nn.Scale: lambda lay: (lambda x: layers.scale(x, lay.factor), layers.scale_backward),
}

#: layers of two or more inputs
_JOINS: dict[type, Callable[[nn.Layer], tuple[Callable, Callable]]] = {
    nn.Add: lambda lay: (layers.add, layers.add_backward),
    nn.Concat: _concat,
    nn.Mul: lambda lay: (layers.mul, layers.mul_backward),
    nn.Sub: lambda lay: (layers.sub, layers.sub_backward),
    nn.Div: lambda lay: (layers.div, layers.div_backward),
    nn.MatMul: lambda lay: (layers.matmul, layers.matmul_backward),
}

_NODES: dict[type, type[Node]] = {nn.Conv2d: Conv, nn.Dense: Dense, nn.LayerNorm: LayerNorm, nn.Dropout: Dropout,
                                  nn.DropPath: Dropout, nn.ClassToken: ClassToken,
                                  nn.PositionEmbedding: PositionEmbedding, nn.MultiHeadAttention: MultiHeadAttention,
                                  nn.WindowAttention: WindowAttention}


class _BatchNorm(Node):
    """The reference BatchNorm (the one layer whose devices talk) as a node of the graph."""

    def __init__(self, name: str, layer: nn.Layer) -> None:
        super().__init__(name, layer)
        self.bn = BatchNorm(name, layer.eps, layer.momentum)

    def forward(self, run, inputs):
        return self.bn.forward(run, inputs[0])

    def backward(self, run, dys):
        return [self.bn.backward(run, dys)]


def node(name: str, layer: nn.Layer) -> Node:
    """The reference's implementation of one layer of a definition."""
    kind = type(layer)
    if kind is nn.BatchNorm:
        return _BatchNorm(name, layer)
    if kind in _NODES:
        return _NODES[kind](name, layer)
    if kind in _JOINS:
        return Function(name, layer, *_JOINS[kind](layer), many=True)
    if kind in _FUNCTIONS:
        return Function(name, layer, *_FUNCTIONS[kind](layer))
    raise MultidevError(f"the reference has no {kind.__name__} (node {name!r})")


class Network:
    """A graph's nodes run in order; the backward pass adds up the gradients of outputs used twice."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes = [node(n.name, n.layer) for n in graph.nodes]
        self.watch: Optional[Callable[[nn.Layer, Arrays], None]] = None  # sees every node's inputs

    def forward(self, run: Run, xs: Arrays) -> Arrays:
        values: dict[str, Arrays] = {"input": list(xs)}
        for spec, impl in zip(self.graph.nodes, self.nodes):
            inputs = [values[i] for i in spec.inputs]
            if self.watch is not None:
                self.watch(spec.layer, inputs[0])
            values[spec.name] = impl.forward(run, inputs)
        return values[self.graph.nodes[-1].name]

    def backward(self, run: Run, dys: Arrays) -> Arrays:
        grads: dict[str, Arrays] = {self.graph.nodes[-1].name: dys}
        for spec, impl in zip(reversed(self.graph.nodes), reversed(self.nodes)):
            if spec.name not in grads:
                continue  # feeds nothing the loss depends on
            for name, parts in zip(spec.inputs, impl.backward(run, grads.pop(spec.name))):
                grads[name] = parts if name not in grads else [a + b for a, b in zip(grads[name], parts)]
        return grads["input"]


def build(spec: ModelSpec) -> Network:
    return Network(spec.graph)
