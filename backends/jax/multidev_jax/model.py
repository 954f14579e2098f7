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

from multidev.engine import LN_EPS, ModelSpec, MultidevError
from multidev.nn import layers as md
from multidev.nn.graph import Graph, NodeSpec

from .allreduce import Rows
from .batchnorm import BatchNorm, ChannelSum
from .conv import conv_general_dilated, conv_general_dilated_once
from .forms.sums import matvec

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


def conv(features: int, size: int, name: str, compute: Compute, stride: int = 1, padding: int = 0,
         bias: bool = True, training: bool = False) -> nn.Conv:
    """A square convolution; on the CPU, tiny outputs go through a matrix product, and in training the input may
    be written once (see conv.py)."""
    once = compute.inputs_once and training  # inference has no backward pass to read the input again
    return nn.Conv(features, (size, size), strides=(stride, stride), padding=((padding, padding),) * 2,
                   use_bias=bias, dtype=compute.dtype, precision=compute.precision, name=name,
                   conv_general_dilated=(conv_general_dilated_once if once else conv_general_dilated)
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
    return conv(layer.out_channels, layer.kernel_size, name, run.compute, layer.stride, layer.padding,
                layer.bias, training=run.mask is not None)(x)


def _dense(layer: md.Dense, x: jax.Array, run: _Pass, name: str) -> jax.Array:
    return dense(layer.out_features, name, run.compute, layer.bias)(x)


def _batchnorm(layer: md.BatchNorm, x: jax.Array, run: _Pass, name: str) -> jax.Array:
    return BatchNorm(run.compute.channel_sum, run.rows, name=name)(x, run.mask)


def _layernorm(layer: md.LayerNorm, x: jax.Array, run: _Pass, name: str) -> jax.Array:
    """Flax's LayerNorm over every axis but the batch, gamma and beta per channel (the last axis, NHWC)."""
    return nn.LayerNorm(LN_EPS, dtype=x.dtype, reduction_axes=tuple(range(1, x.ndim)), feature_axes=-1,
                        use_fast_variance=False, name=name)(x)


#: layers with parameters: (layer, input, pass, leaf module name) -> output
_WITH_PARAMS: dict[type, Callable[..., jax.Array]] = {
    md.Conv2d: _conv, md.Dense: _dense, md.BatchNorm: _batchnorm, md.LayerNorm: _layernorm}

_ACTIVATIONS: dict[type, Callable[[jax.Array], jax.Array]] = {
    md.ReLU: nn.relu, md.GELU: partial(nn.gelu, approximate=False), md.Tanh: jnp.tanh, md.Sigmoid: nn.sigmoid}


def _pool(layer: md.MaxPool2d, x: jax.Array) -> jax.Array:
    pool = nn.avg_pool if isinstance(layer, md.AvgPool2d) else nn.max_pool
    k, s = layer.kernel_size, layer.step
    return pool(x, (k, k), strides=(s, s), padding="VALID")


def _flatten(x: jax.Array) -> jax.Array:
    """C, H, W order (canonical): NHWC images go back to NCHW before the reshape."""
    return jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1) if x.ndim == 4 else x


def _dropout(node: NodeSpec, x: jax.Array, run: _Pass) -> jax.Array:
    """x times the core's multipliers in training (in x's dtype after the product), the identity in inference."""
    if run.mask is None:
        return x
    if run.drops is None or node.name not in run.drops:
        raise MultidevError(MISSING_MASKS)
    return (x * nhwc(run.drops[node.name])).astype(x.dtype)


def _node(node: NodeSpec, xs: list[jax.Array], run: _Pass) -> jax.Array:
    """One node's output from its inputs' (NHWC images or (N, F) features)."""
    layer, kind, x = node.layer, type(node.layer), xs[0]
    if kind in _WITH_PARAMS:
        return run.scoped(node.name, partial(_WITH_PARAMS[kind], layer, x, run))
    if kind in _ACTIVATIONS:
        return _ACTIVATIONS[kind](x)
    if kind in (md.MaxPool2d, md.AvgPool2d):
        return _pool(layer, x)
    if kind is md.GlobalAvgPool:
        return x.mean(axis=(1, 2))
    if kind is md.Flatten:
        return _flatten(x)
    if kind is md.Dropout:
        return _dropout(node, x, run)
    if kind is md.Add:
        return reduce(lambda a, b: a + b, xs)  # left to right, as the reference
    if kind is md.Concat:
        return jnp.concatenate(xs, axis=-1)  # channels: the last axis in NHWC
    raise MultidevError(f"the JAX engine cannot build {kind.__name__} (node {node.name!r}): upgrade multidev-jax")


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
