"""Any model definition (``spec.graph``) in Flax, with the core's canonical names.

Every node becomes Flax's own layer (``nn.Conv``, ``nn.Dense``,
``nn.LayerNorm``, ``nn.max_pool``, ...) or the engine's BatchNorm, and module
paths equal the canonical names, one nested module per dotted scope
(``stage2.block1.conv1`` is ``stage2`` / ``block1`` / ``conv1``), so
:mod:`.layout` only renames leaves and reorders axes. Images arrive NCHW (the
canonical layout) and are turned NHWC once, at the input, where XLA's
convolutions want them; Flatten turns them back to NCHW so that a dense
weight after it keeps the canonical C, H, W feature order, and Dropout's
masks, drawn by the core in NCHW, are turned like the images.
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
from .conv import conv_general_dilated, conv_general_dilated_once
from .forms.sums import matvec
from .pools import Pads, chw, pool

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
                   name=name, conv_general_dilated=(conv_general_dilated_once if once else conv_general_dilated)
                   if compute.cpu else None)


def dense(features: int, name: str, compute: Compute, bias: bool = True) -> nn.Dense:
    return nn.Dense(features, use_bias=bias, dtype=compute.dtype, precision=compute.precision, name=name)


def nhwc(a: jax.Array) -> jax.Array:
    """Images NCHW -> NHWC (the engine's layout inside); feature vectors as they are."""
    return jnp.transpose(a, (0, 2, 3, 1)) if a.ndim == 4 else a


class Scope(nn.Module):
    """One dotted part of the canonical names, so that Flax's paths nest as the names do.

    Called once per layer below it, with the rest of the layer's path and
    ``make``, which creates and applies the layer under the name it is given.
    """

    @nn.compact
    def __call__(self, path: tuple[str, ...], make: Callable[[str], jax.Array]) -> jax.Array:
        if len(path) == 1:
            return make(path[0])
        return Scope(name=path[0])(path[1:], make)


@dataclass
class _Pass:
    """What the nodes of one forward pass share: the settings, the rows' masks, the scopes made so far."""

    rows: Rows                                 # what BatchNorm's statistics cover (batchnorm.py)
    compute: Compute
    mask: Optional[jax.Array]                  # real rows (training), None in inference
    drops: Optional[Mapping[str, jax.Array]]   # Dropout node -> multipliers, NCHW as the core drew them
    scopes: dict[str, Scope] = field(default_factory=dict)

    def scoped(self, name: str, make: Callable[[str], jax.Array]) -> jax.Array:
        """``make`` under the canonical ``name``: inside its scope modules, each made once per pass."""
        head, *rest = name.split(".")
        if not rest:
            return make(head)
        if head not in self.scopes:
            self.scopes[head] = Scope(name=head)
        return self.scopes[head](tuple(rest), make)


def _conv(layer: md.Conv2d, x: jax.Array, run: _Pass, name: str) -> jax.Array:
    top, bottom, left, right = layer.sides(chw(x))  # "same" and four sides, as the model language states them
    return conv(layer.out_channels, layer.kernel_size, name, run.compute, layer.stride, ((top, bottom), (left, right)),
                layer.bias, run.mask is not None, layer.groups, layer.dilation)(x)


def _dense(layer: md.Dense, x: jax.Array, run: _Pass, name: str) -> jax.Array:
    return dense(layer.out_features, name, run.compute, layer.bias)(x)


def _batchnorm(layer: md.BatchNorm, x: jax.Array, run: _Pass, name: str) -> jax.Array:
    return BatchNorm(run.compute.channel_sum, run.rows, layer.eps, layer.momentum, name=name)(x, run.mask)


def _layernorm(layer: md.LayerNorm, x: jax.Array, run: _Pass, name: str) -> jax.Array:
    """Flax's LayerNorm. Over a whole sample, gamma and beta per channel (NHWC's last axis, else the sample's first);
    over the last ``last`` axes, per value of those (other values than images: their layout is the canonical one)."""
    if layer.last is None:
        axes, features = tuple(range(1, x.ndim)), 3 if x.ndim == 4 else 1
    elif x.ndim != 4:
        axes = features = tuple(range(x.ndim - layer.last, x.ndim))
    else:
        raise MultidevError(f"the JAX engine normalises images over a whole sample only, not the last {layer.last} "
                            f"axes ({layer.where(name)}): use LayerNorm() on them, or upgrade multidev-jax")
    return nn.LayerNorm(layer.eps, dtype=x.dtype, reduction_axes=axes, feature_axes=features, use_bias=layer.affine,
                        use_scale=layer.affine, use_fast_variance=False, name=name)(x)


#: torch's definitions, jax.nn's own functions (hardsigmoid: relu6(x + 3) / 6)
_ACTIVATIONS: dict[type, Callable[[jax.Array], jax.Array]] = {
    md.ReLU: jax.nn.relu, md.Tanh: jnp.tanh, md.Sigmoid: jax.nn.sigmoid, md.ReLU6: jax.nn.relu6, md.SiLU: jax.nn.silu,
    md.HardSigmoid: jax.nn.hard_sigmoid, md.HardSwish: jax.nn.hard_swish}


def engine_axis(x: jax.Array, sample_axis: int) -> int:
    """A canonical axis of the sample (negative from the end) as an axis of ``x``: images' C, H, W are NHWC's
    3, 1, 2; other values keep the canonical layout, one past the batch."""
    index = sample_axis % (x.ndim - 1)
    return (3, 1, 2)[index] if x.ndim == 4 else index + 1


def _as_images(x: jax.Array) -> jax.Array:
    """A value of fewer axes as NHWC images that broadcast against images as its canonical shape does against
    (C, H, W): NumPy's rule lines up the last axes, so features (F,) meet W."""
    return nhwc(x.reshape(x.shape[:1] + (1,) * (4 - x.ndim) + x.shape[1:]))


def _product(xs: list[jax.Array]) -> jax.Array:
    """Mul: NumPy's broadcasting of the canonical sample shapes (images among themselves broadcast in NHWC as in
    C, H, W, as every axis moves alike)."""
    if any(x.ndim == 4 for x in xs):
        xs = [x if x.ndim == 4 else _as_images(x) for x in xs]
    return reduce(lambda a, b: a * b, xs)  # left to right, as the reference


def _flatten(x: jax.Array) -> jax.Array:
    """C, H, W order (canonical): NHWC images go back to NCHW before the reshape."""
    return (jnp.transpose(x, (0, 3, 1, 2)) if x.ndim == 4 else x).reshape(x.shape[0], -1)


def _dropout(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    """x times the core's multipliers in training (in x's dtype after the product), the identity in inference."""
    x = xs[0]
    if run.mask is None:
        return x
    if run.drops is None or node.name not in run.drops:
        raise MultidevError(MISSING_MASKS)
    return (x * nhwc(run.drops[node.name])).astype(x.dtype)


#: (node, its inputs, the pass) -> its output (NHWC images, other values in the canonical layout)
Builder = Callable[[NodeSpec, list[jax.Array], _Pass], jax.Array]


def _with_params(make: Callable[..., jax.Array]) -> Builder:
    """A layer with parameters, made under its canonical name: make(layer, input, pass, leaf module name)."""
    return lambda node, xs, run: run.scoped(node.name, partial(make, node.layer, xs[0], run))


def _elementwise(function: Callable[[jax.Array], jax.Array]) -> Builder:
    return lambda node, xs, run: function(xs[0])


def _gelu(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return jax.nn.gelu(xs[0], approximate=node.layer.approximate == "tanh")


def _leaky_relu(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return jax.nn.leaky_relu(xs[0], node.layer.negative_slope)


def _pool(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return pool(node.layer, xs[0])


def _global_avg_pool(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return xs[0].mean(axis=(1, 2), keepdims=node.layer.keepdims)  # (N, 1, 1, C): the (C, 1, 1) images of NHWC


def _concat(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    return jnp.concatenate(xs, axis=engine_axis(xs[0], node.layer.axis))


_BUILDERS: dict[type, Builder] = {
    md.Conv2d: _with_params(_conv), md.Dense: _with_params(_dense), md.BatchNorm: _with_params(_batchnorm),
    md.LayerNorm: _with_params(_layernorm), **{kind: _elementwise(f) for kind, f in _ACTIVATIONS.items()},
    md.GELU: _gelu, md.LeakyReLU: _leaky_relu, md.MaxPool2d: _pool, md.AvgPool2d: _pool,
    md.GlobalAvgPool: _global_avg_pool, md.Flatten: _elementwise(_flatten), md.Dropout: _dropout,
    md.Add: lambda node, xs, run: reduce(lambda a, b: a + b, xs),  # left to right, as the reference
    md.Mul: lambda node, xs, run: _product(xs), md.Concat: _concat}

#: the names (as ``multidev.nn.layers.LAYERS`` has them) of the layers this engine builds
BUILT = frozenset(kind.__name__ for kind in _BUILDERS)


def _node(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    """One node's output from its inputs'."""
    kind = type(node.layer)
    if kind not in _BUILDERS:
        raise MultidevError(f"the JAX engine cannot build {kind.__name__} (node {node.name!r}): upgrade multidev-jax")
    return _BUILDERS[kind](node, xs, run)


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
        run = _Pass(self.rows, self.compute, mask, drops)
        values = {"input": nhwc(x)}  # the one transpose in: NHWC from here on
        for node in self.graph.nodes:
            values[node.name] = _node(node, [values[i] for i in node.inputs], run)
        return self.compute.logits(values[self.graph.nodes[-1].name])


def build(spec: ModelSpec, rows: Rows = Rows(), compute: Compute = Compute()) -> nn.Module:
    """The network of ``spec.graph``, BatchNorm over ``rows``; ``compute.cpu``: tiny convolutions for CPUs."""
    return Network(spec.graph, rows, compute)
