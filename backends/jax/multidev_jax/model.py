"""Any model definition (``spec.graph``) in Flax, with the core's canonical names.

Every node becomes Flax's own layer (``nn.Conv``, ``nn.Dense``,
``nn.max_pool``, ...) or the engine's BatchNorm or LayerNorm
(:mod:`.layernorm`), and module
paths equal the canonical names, one nested module per dotted scope
(``stage2.block1.conv1`` is ``stage2`` / ``block1`` / ``conv1``), so
:mod:`.layout` only renames leaves and reorders axes. Images arrive NCHW (the
canonical layout) and are turned NHWC once, at the input, where XLA's
convolutions want them; the layers that read the canonical order (Flatten,
Reshape, Transpose, MatMul) turn them back (:mod:`.shapes`), and Dropout's
masks, drawn by the core in NCHW, are turned like the images. The token
layers are the engine's own modules (:mod:`.tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial, reduce
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from multidev.engine import ModelSpec, MultidevError
from multidev.nn import layers as md
from multidev.nn.graph import Graph, NodeSpec

from .allreduce import Rows
from .batchnorm import BatchNorm, ChannelSum
from .conv import conv_general_dilated
from .forms.sums import matvec
from .layernorm import LayerNorm
from .pools import Pads, chw, pool
from .shapes import (aligned, engine_axis, flatten, matmul, mean, nchw, nhwc, padded_axis, product, reshape,
                     sliced, transpose)
from .tokens import ClassToken, MultiHeadAttention, PositionEmbedding, WindowAttention

#: Full float32 everywhere: the engines promise the same answers, and TF32 on GPUs would break the 1e-3 tolerance.
PRECISION = lax.Precision.HIGHEST
#: TF32 matrix multiplies ("tensorfloat32" is HIGH), only where the user opts in on a GPU
TF32 = lax.Precision.HIGH

#: what a training step of a model with Dropout without the core's masks raises
MISSING_MASKS = ("the batch has no Dropout masks: the core draws them for every training step "
                 "(Shards.masks, multidev.rules.dropout); cut training batches with the core's masks")


@dataclass(frozen=True)
class Compute:
    """How the network computes, apart from its parameters' dtype.

    ``dtype``: activations, convolutions and matrix products (None: the
    parameters' dtype; bfloat16 for precision bf16, the parameters staying
    float32). BatchNorm and the logits stay in the parameters' dtype.
    ``inputs_once``: in training, each convolution's input is written once
    (CPUs: :mod:`.forms.conv_inputs`). ``channel_sum``: BatchNorm's sums, in
    the run's form (:mod:`.forms.sums`).
    """

    cpu: bool = False
    dtype: Any = None
    precision: lax.Precision = PRECISION
    inputs_once: bool = False
    channel_sum: ChannelSum = matvec

    def logits(self, z: jax.Array) -> jax.Array:
        """Logits in float32 (bf16 keeps float32 parameters), so the loss and its sums never run in bfloat16."""
        return z if self.dtype is None else z.astype(jnp.float32)


def conv(features: int, size: int, name: str, compute: Compute, stride: int = 1,
         padding: Pads = ((0, 0), (0, 0)), bias: bool = True, training: bool = False, groups: int = 1,
         dilation: int = 1) -> nn.Conv:
    """A square convolution, ``padding`` explicit per side; on the CPU, tiny outputs go through a matrix product,
    and in training the input may be written once (see conv.py)."""
    once = compute.inputs_once and training  # inference has no backward pass to read the input again
    return nn.Conv(features, (size, size), strides=(stride, stride), padding=padding, kernel_dilation=(dilation,) * 2,
                   feature_group_count=groups, use_bias=bias, dtype=compute.dtype, precision=compute.precision,
                   name=name, conv_general_dilated=partial(conv_general_dilated, once=once,
                                                           channel_sum=compute.channel_sum) if compute.cpu else None)


def dense(features: int, name: str, compute: Compute, bias: bool = True) -> nn.Dense:
    return nn.Dense(features, use_bias=bias, dtype=compute.dtype, precision=compute.precision, name=name)


#: a layer's module under the name it is given (made inside the module that calls it), and its output from it
Make = Callable[[str], nn.Module]
Apply = Callable[[nn.Module], jax.Array]


class Scope(nn.Module):
    """One dotted part of the canonical names, so that Flax's paths nest as the names do.

    Called once per layer below it, with the rest of the layer's path,
    ``make`` and ``apply``. ``own``: the layer's name is itself a scope (an
    imported ViT's ``encoder`` is its PositionEmbedding and holds its blocks):
    where its path ends, its arrays are this scope's own, beside the scopes
    below (``nn.share_scope``), as the canonical names put them.
    """

    @nn.compact
    def __call__(self, path: tuple[str, ...], make: Make, apply: Apply, own: bool = False) -> jax.Array:
        if not path:
            module = make(self.name)
            nn.share_scope(self, module)
            return apply(module)
        if len(path) == 1 and not own:
            return apply(make(path[0]))
        return Scope(name=path[0])(path[1:], make, apply, own)


@dataclass
class _Pass:
    """What the nodes of one forward pass share: the settings, the rows' masks, the scopes made so far."""

    rows: Rows                                 # what BatchNorm's statistics cover (batchnorm.py)
    compute: Compute
    mask: Optional[jax.Array]                  # real rows (training), None in inference
    drops: Optional[Mapping[str, jax.Array]]   # Dropout node -> multipliers, NCHW as the core drew them
    parents: frozenset[str] = frozenset()      # the names that scope others (``a`` and ``a.b`` of ``a.b.c``)
    scopes: dict[str, Scope] = field(default_factory=dict)

    def scoped(self, name: str, make: Make, apply: Apply) -> jax.Array:
        """The layer's module under the canonical ``name``, applied: inside its scope modules, each made once per
        pass."""
        head, *rest = name.split(".")
        own = name in self.parents
        if not rest and not own:
            return apply(make(head))
        if head not in self.scopes:
            self.scopes[head] = Scope(name=head)
        return self.scopes[head](tuple(rest), make, apply, own)


def _conv(layer: md.Conv2d, x: jax.Array, run: _Pass, name: str) -> nn.Module:
    top, bottom, left, right = layer.sides(chw(x))  # "same" and four sides, as the model language states them
    return conv(layer.out_channels, layer.kernel_size, name, run.compute, layer.stride, ((top, bottom), (left, right)),
                layer.bias, run.mask is not None, layer.groups, layer.dilation)


def _dense(layer: md.Dense, x: jax.Array, run: _Pass, name: str) -> nn.Module:
    return dense(layer.out_features, name, run.compute, layer.bias)


def _batchnorm(layer: md.BatchNorm, x: jax.Array, run: _Pass, name: str) -> nn.Module:
    return BatchNorm(run.compute.channel_sum, run.rows, layer.eps, layer.momentum, name=name)


def _channels_last(layer: md.BatchNorm, norm: nn.Module, x: jax.Array, run: _Pass) -> jax.Array:
    """The engine's BatchNorm wants the channels last, as NHWC images and features have them; the channels of other
    ranks (the sample's first axis, tokens' L) go there and back."""
    if x.ndim in (2, 4):
        return norm(x, run.mask)
    return jnp.moveaxis(norm(jnp.moveaxis(x, 1, -1), run.mask), -1, 1)


def _layernorm(layer: md.LayerNorm, x: jax.Array, run: _Pass, name: str) -> nn.Module:
    """Over a whole sample, gamma and beta per channel (NHWC's last axis, else the sample's first); over the last
    ``last`` axes, per value of those, in the canonical order (:func:`_canonically`)."""
    if layer.last is None:
        return LayerNorm(layer.eps, tuple(range(1, x.ndim)), (3 if x.ndim == 4 else 1,), layer.affine, name=name)
    axes = tuple(range(x.ndim - layer.last, x.ndim))
    return LayerNorm(layer.eps, axes, axes, layer.affine, name=name)


def _canonically(layer: md.LayerNorm, norm: nn.Module, x: jax.Array, run: _Pass) -> jax.Array:
    """LayerNorm over the last axes: images go to NCHW and back, so that gamma's (C, H, W) is the core's and not
    Flax's (H, W, C)."""
    return norm(x) if layer.last is None else nhwc(norm(nchw(x)))


def _attention(layer: md.MultiHeadAttention, x: jax.Array, run: _Pass, name: str) -> nn.Module:
    return MultiHeadAttention(layer.heads, layer.bias, run.compute.dtype, run.compute.precision, name=name)


def _window_attention(layer: md.WindowAttention, x: jax.Array, run: _Pass, name: str) -> nn.Module:
    return WindowAttention(layer.heads, layer.bias, run.compute.dtype, run.compute.precision, layer.window,
                           layer.shift, name=name)


def _on_last_axis(layer: md.Layer, module: nn.Module, x: jax.Array, run: _Pass) -> jax.Array:
    """A layer of the canonical last axis: a rank-3 sample, held as images are (an image's C last, a grid of tokens'
    (H, W, C) W last), goes to its canonical order and back; XLA folds the transposes into the product."""
    return nhwc(module(nchw(x)))


#: torch's definitions, jax.nn's own functions (hardsigmoid: relu6(x + 3) / 6)
_ACTIVATIONS: dict[type, Callable[[jax.Array], jax.Array]] = {
    md.ReLU: jax.nn.relu, md.Tanh: jnp.tanh, md.Sigmoid: jax.nn.sigmoid, md.ReLU6: jax.nn.relu6, md.SiLU: jax.nn.silu,
    md.HardSigmoid: jax.nn.hard_sigmoid, md.HardSwish: jax.nn.hard_swish}


def _dropout(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    """x times the core's multipliers in training (in x's dtype after the product), the identity in inference;
    DropPath's (n, 1, ..., 1) broadcast, one per sample, in either layout."""
    x = xs[0]
    if run.mask is None:
        return x
    if run.drops is None or node.name not in run.drops:
        raise MultidevError(MISSING_MASKS)
    return (x * nhwc(run.drops[node.name])).astype(x.dtype)


#: (node, its inputs, the pass) -> its output (NHWC images, other values in the canonical layout)
Builder = Callable[[NodeSpec, list[jax.Array], _Pass], jax.Array]


def _applied(layer: md.Layer, module: nn.Module, x: jax.Array, run: _Pass) -> jax.Array:
    return module(x)


def _with_params(make: Callable[..., nn.Module], apply: Callable[..., jax.Array] = _applied) -> Builder:
    """A layer with parameters, its module made under its canonical name: make(layer, input, pass, module name),
    then its output apply(layer, module, input, pass)."""
    return lambda node, xs, run: run.scoped(node.name, partial(make, node.layer, xs[0], run),
                                            partial(apply, node.layer, x=xs[0], run=run))


def _elementwise(function: Callable[[jax.Array], jax.Array]) -> Builder:
    return lambda node, xs, run: function(xs[0])


def _gelu(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return jax.nn.gelu(xs[0], approximate=node.layer.approximate == "tanh")


def _leaky_relu(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return jax.nn.leaky_relu(xs[0], node.layer.negative_slope)


def _pool(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return pool(node.layer, xs[0], taps=run.compute.cpu)


def _global_avg_pool(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return xs[0].mean(axis=(1, 2), keepdims=node.layer.keepdims)  # (N, 1, 1, C): the (C, 1, 1) images of NHWC


def _concat(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return jnp.concatenate(xs, axis=engine_axis(xs[0], node.layer.axis))


def _of_layer(function: Callable[[Any, jax.Array], jax.Array]) -> Builder:
    """A layer without parameters that reads its hyperparameters: function(layer, input)."""
    return lambda node, xs, run: function(node.layer, xs[0])


def _softmax(layer: md.Softmax, x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x, axis=engine_axis(x, layer.axis))


_BUILDERS: dict[type, Builder] = {
    md.Conv2d: _with_params(_conv), md.Dense: _with_params(_dense, _on_last_axis),
    md.BatchNorm: _with_params(_batchnorm, _channels_last), md.LayerNorm: _with_params(_layernorm, _canonically),
    **{kind: _elementwise(f) for kind, f in _ACTIVATIONS.items()},
    md.GELU: _gelu, md.LeakyReLU: _leaky_relu, md.MaxPool2d: _pool, md.AvgPool2d: _pool,
    md.GlobalAvgPool: _global_avg_pool, md.Dropout: _dropout, md.DropPath: _dropout,
    md.Add: lambda node, xs, run: reduce(lambda a, b: a + b, xs),  # left to right, as the reference
    md.Mul: lambda node, xs, run: product(xs), md.Concat: _concat,
    md.Sub: lambda node, xs, run: jnp.subtract(*aligned(xs)), md.Div: lambda node, xs, run: jnp.divide(*aligned(xs)),
    md.MatMul: lambda node, xs, run: matmul(xs[0], xs[1], run.compute.precision),
    md.Softmax: _of_layer(_softmax), md.Scale: _of_layer(lambda layer, x: x * layer.factor),
    md.Flatten: _elementwise(flatten), md.Reshape: _of_layer(reshape), md.Transpose: _of_layer(transpose),
    md.Slice: _of_layer(sliced), md.Pad: _of_layer(padded_axis), md.Mean: _of_layer(mean),
    md.ClassToken: _with_params(lambda layer, x, run, name: ClassToken(name=name)),
    md.PositionEmbedding: _with_params(lambda layer, x, run, name: PositionEmbedding(name=name)),
    md.MultiHeadAttention: _with_params(_attention),
    md.WindowAttention: _with_params(_window_attention, _on_last_axis)}

#: the names (as ``multidev.nn.layers.LAYERS`` has them) of the layers this engine builds
BUILT = frozenset(kind.__name__ for kind in _BUILDERS)


def _node(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    """One node's output from its inputs'."""
    kind = type(node.layer)
    if kind not in _BUILDERS:
        raise MultidevError(f"the JAX engine cannot build {kind.__name__} (node {node.name!r}): upgrade multidev-jax")
    return _BUILDERS[kind](node, xs, run)


def _parents(graph: Graph) -> frozenset[str]:
    """Every name that scopes another node's (``a`` and ``a.b`` of ``a.b.c``)."""
    return frozenset(".".join(parts[:i]) for parts in (node.name.split(".") for node in graph.nodes)
                     for i in range(1, len(parts)))


class Network(nn.Module):
    """A model definition run node by node.

    Call with ``mask`` (bool per row: the shard's real rows) and ``drops``
    (Dropout node -> the core's multipliers for these rows, NCHW) in
    training; with ``mask`` None in inference (BatchNorm's running
    statistics, no Dropout). Training runs inside ``shard_map`` (BatchNorm).
    """

    graph: Graph
    rows: Rows = Rows()  # what BatchNorm's statistics cover: a device's shard (local) or the batch (sync)
    compute: Compute = Compute()

    @nn.compact
    def __call__(self, x: jax.Array, mask: Optional[jax.Array] = None,
                 drops: Optional[Mapping[str, jax.Array]] = None) -> jax.Array:
        run = _Pass(self.rows, self.compute, mask, drops, _parents(self.graph))
        values = {"input": nhwc(x)}  # the one transpose in: NHWC from here on
        for node in self.graph.nodes:
            values[node.name] = _node(node, [values[i] for i in node.inputs], run)
        return self.compute.logits(values[self.graph.nodes[-1].name])


def build(spec: ModelSpec, rows: Rows = Rows(), compute: Compute = Compute()) -> nn.Module:
    """The network of ``spec.graph``, BatchNorm over ``rows``; ``compute.cpu``: tiny convolutions for CPUs."""
    return Network(spec.graph, rows, compute)
