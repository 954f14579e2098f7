"""Any model of the model language (``spec.graph``) as one torch module, built from torch's own layers.

A node that holds parameters is a torch module at the path of its canonical
name (``stage1.block1.conv1``: nested containers), so ``state_dict()`` is the
canonical state with no renaming. The other layers are torch functions. The
forward runs the nodes in the graph's order and lets go of each output after
its last reader, so a chain keeps no more alive than a hand-written one.
Convolutions and pools work out their padding for their input's size once,
when built (:mod:`.windows`); the token layers' modules are in :mod:`.tokens`.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from multidev.engine import ModelSpec, MultidevError
from multidev.nn import layers as L

from . import tokens, windows
from .batchnorm import BatchNorm

Masks = Optional[dict[str, torch.Tensor]]
Shape = tuple[int, ...]
Function = Callable[[list[torch.Tensor]], torch.Tensor]

MASKS_MISSING = ("the model has Dropout but this training batch carries no masks: the core draws them "
                 "(multidev.rules.dropout.shard_masks) and hands them over in Shards.masks")


class LayerNorm(nn.Module):
    """Each sample normalised over all its values (``last`` None) or over its last ``last`` axes.

    Over all of them it is GroupNorm with one group, a scale and shift per channel: torch's fused kernel, for
    images and features alike; over the last axes, torch's own layer_norm. ``affine`` False: no scale and shift.
    """

    def __init__(self, layer: L.LayerNorm, shape: Shape) -> None:
        super().__init__()
        self.eps = layer.eps
        self.normalized = None if layer.last is None else tuple(shape[-layer.last:])
        size = (shape[0],) if self.normalized is None else self.normalized
        self.gamma = nn.Parameter(torch.ones(size)) if layer.affine else None
        self.beta = nn.Parameter(torch.zeros(size)) if layer.affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.normalized is None:
            return F.group_norm(x, 1, self.gamma, self.beta, self.eps)
        return F.layer_norm(x, self.normalized, self.gamma, self.beta, self.eps)


def _module(layer: L.Layer, shape: Shape) -> Optional[nn.Module]:
    """torch's own layer for a node that holds parameters (``shape``: its first input's); else None."""
    if isinstance(layer, L.Conv2d):
        return windows.Conv2d(layer, shape)
    if isinstance(layer, L.Dense):
        return nn.Linear(shape[-1], layer.out_features, bias=layer.bias)  # on the last axis, of any rank
    if isinstance(layer, L.BatchNorm):
        return BatchNorm(shape[0], layer.eps, layer.momentum)
    if isinstance(layer, L.LayerNorm):
        return LayerNorm(layer, shape)
    return tokens.module(layer, shape)


def _aligned(xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The inputs broadcast as the language does, from the sample's last axis: a sample of fewer axes gets size-1
    axes after the batch axis, where torch's own broadcasting would line its first up with the batch."""
    rank = max(x.dim() for x in xs)
    return [x[(slice(None),) + (None,) * (rank - x.dim())] for x in xs]


def _pad(layer: L.Pad, x: torch.Tensor) -> torch.Tensor:
    """F.pad lists the last axis's sides first: the sample's axis is that many pairs from the end."""
    from_end = x.dim() - 1 - (layer.axis % (x.dim() - 1) + 1)
    return F.pad(x, (0, 0) * from_end + (layer.before, layer.after), value=layer.value)


def _slice(layer: L.Slice, x: torch.Tensor) -> torch.Tensor:
    axis, start, stop, step = layer.bounds(tuple(x.shape[1:]))
    return x[(slice(None),) * (axis + 1) + (slice(start, stop, step),)]


def _axis(axis: int, x: torch.Tensor) -> int:
    """The dimension of x (batch first) of the sample's ``axis``, which may count from the end."""
    return axis % (x.dim() - 1) + 1


#: the layers without parameters, as functions of the layer and its inputs (pools: :func:`windows.pool`)
FUNCTIONS: dict[type, Callable[[L.Layer, list[torch.Tensor]], torch.Tensor]] = {
    L.ReLU: lambda _, xs: F.relu(xs[0]),
    L.GELU: lambda layer, xs: F.gelu(xs[0], approximate=layer.approximate),
    L.Tanh: lambda _, xs: torch.tanh(xs[0]),
    L.Sigmoid: lambda _, xs: torch.sigmoid(xs[0]),
    L.ReLU6: lambda _, xs: F.relu6(xs[0]),
    L.LeakyReLU: lambda layer, xs: F.leaky_relu(xs[0], layer.negative_slope),
    L.SiLU: lambda _, xs: F.silu(xs[0]),
    L.HardSigmoid: lambda _, xs: F.hardsigmoid(xs[0]),
    L.HardSwish: lambda _, xs: F.hardswish(xs[0]),
    L.GlobalAvgPool: lambda layer, xs: xs[0].mean(dim=(2, 3), keepdim=layer.keepdims),
    L.Flatten: lambda _, xs: xs[0].flatten(1),
    L.Add: lambda _, xs: functools.reduce(operator.add, xs),
    L.Mul: lambda _, xs: functools.reduce(operator.mul, _aligned(xs)),
    L.Sub: lambda _, xs: operator.sub(*_aligned(xs)),
    L.Div: lambda _, xs: operator.truediv(*_aligned(xs)),
    L.Concat: lambda layer, xs: torch.cat(xs, _axis(layer.axis, xs[0])),
    L.MatMul: lambda _, xs: torch.matmul(*_aligned(xs)),
    L.Softmax: lambda layer, xs: F.softmax(xs[0], _axis(layer.axis, xs[0])),
    L.Scale: lambda layer, xs: xs[0] * layer.factor,
    L.Reshape: lambda layer, xs: _reshape(layer, xs[0]),
    L.Transpose: lambda layer, xs: xs[0].permute(0, *(p + 1 for p in layer.perm)),
    L.Slice: lambda layer, xs: _slice(layer, xs[0]),
    L.Pad: lambda layer, xs: _pad(layer, xs[0]),
    L.Mean: lambda layer, xs: xs[0].mean(layer.batched(xs[0].dim() - 1), layer.keepdims),
}


def _reshape(layer: L.Reshape, x: torch.Tensor) -> torch.Tensor:
    """Each row to the layer's shape, its -1 worked out by the layer from a row's shape: a batch of no rows (a
    process's empty shard under FSDP2) cannot say it to ``reshape``."""
    return x.reshape(x.shape[0], *layer.infer("", [tuple(x.shape[1:])]))


def _apply(layer: L.Layer, xs: list[torch.Tensor]) -> torch.Tensor:
    """``FUNCTIONS``' entry, looked up by name at each call so that the model pickles (its entries are lambdas)."""
    return FUNCTIONS[type(layer)](layer, xs)


def _first(function: Callable[[torch.Tensor], torch.Tensor], xs: list[torch.Tensor]) -> torch.Tensor:
    return function(xs[0])


def _function(layer: L.Layer, node: str, shape: Shape) -> Optional[Function]:
    """The function of node ``node`` without parameters (``shape``: its first input's); None for Dropout and
    DropPath (masks are the forward's: DropPath's, one per sample (n, 1, ..., 1), broadcast)."""
    if isinstance(layer, L.Dropout):
        return None
    if isinstance(layer, L.MaxPool2d):  # AvgPool2d too: the padding worked out once for the input's size
        return functools.partial(_first, windows.pool(layer, shape))
    if type(layer) not in FUNCTIONS:
        raise MultidevError(f"the torch engine cannot build {layer.where(node)}: upgrade multidev-torch")
    return functools.partial(_apply, layer)


class Network(nn.Module):
    """``spec.graph`` run node by node; ``masks`` (node -> this shard's Dropout multipliers) in training."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        shapes = spec.graph.shapes(spec.in_shape)
        last_reader = {name: i for i, node in enumerate(spec.graph.nodes) for name in node.inputs}
        self._steps = []  # (node name, layer, input names, its function (None: a module), outputs read no more)
        for i, node in enumerate(spec.graph.nodes):
            shape = shapes[node.inputs[0]]
            module = _module(node.layer, shape)
            if module is not None:
                self._add(node.name, module)
            done = tuple(n for n in dict.fromkeys(node.inputs) if last_reader[n] == i)
            self._steps.append((node.name, node.layer, node.inputs,
                                None if module is not None else _function(node.layer, node.name, shape), done))

    def _add(self, name: str, module: nn.Module) -> None:
        """``module`` at the dotted path ``name``, making the containers on the way."""
        parent, path = self, name.split(".")
        try:
            for part in path[:-1]:
                if not isinstance(getattr(parent, part, None), nn.Module):
                    parent.add_module(part, nn.Module())
                parent = getattr(parent, part)
            parent.add_module(path[-1], module)
        except (KeyError, TypeError) as exc:
            raise MultidevError(f"the torch engine cannot hold a layer at {name!r} ({exc}): rename the layer") \
                from None

    def forward(self, x: torch.Tensor, masks: Masks = None) -> torch.Tensor:
        outs = {"input": x}
        for name, layer, inputs, function, done in self._steps:
            xs = [outs[n] for n in inputs]
            if function is not None:
                out = function(xs)
            elif isinstance(layer, L.Dropout):
                out = xs[0] * self._mask(name, masks, xs[0]) if self.training else xs[0]
            else:  # looked up each time, so a module swapped in (model surgery) is the one that runs
                out = self.get_submodule(name)(xs[0])
            for n in done:
                del outs[n]
            outs[name] = out
        return out

    @staticmethod
    def _mask(name: str, masks: Masks, x: torch.Tensor) -> torch.Tensor:
        """The core's multipliers (0 or 1 / (1 - p)) of Dropout ``name``, in x's dtype (bfloat16 under autocast)."""
        if masks is None or name not in masks:
            raise MultidevError(MASKS_MISSING)
        return masks[name].to(x.dtype)


def build(spec: ModelSpec) -> nn.Module:
    return Network(spec)
