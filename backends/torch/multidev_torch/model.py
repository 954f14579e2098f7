"""Any model of the model language (``spec.graph``) as one torch module, built from torch's own layers.

A node that holds parameters is a torch module at the path of its canonical
name (``stage1.block1.conv1``: nested containers), so ``state_dict()`` is the
canonical state with no renaming. The other layers are torch functions. The
forward runs the nodes in the graph's order and lets go of each output after
its last reader, so a chain keeps no more alive than a hand-written one.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from multidev.engine import LN_EPS, ModelSpec, MultidevError
from multidev.nn import layers as L

from .batchnorm import BatchNorm

Masks = Optional[dict[str, torch.Tensor]]

MASKS_MISSING = ("the model has Dropout but this training batch carries no masks: the core draws them "
                 "(multidev.rules.dropout.shard_masks) and hands them over in Shards.masks")


class LayerNorm(nn.Module):
    """Each sample normalised over all its values (C, H, W together), a scale and shift per channel.

    That is GroupNorm with one group: torch's fused kernel, for images and for features alike.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, 1, self.gamma, self.beta, LN_EPS)


def _module(layer: L.Layer, cin: int) -> Optional[nn.Module]:
    """torch's own layer for a node that holds parameters (``cin``: its input's channels or features); else None."""
    if isinstance(layer, L.Conv2d):
        return nn.Conv2d(cin, layer.out_channels, layer.kernel_size, layer.stride, layer.padding, bias=layer.bias)
    if isinstance(layer, L.Dense):
        return nn.Linear(cin, layer.out_features, bias=layer.bias)
    if isinstance(layer, L.BatchNorm):
        return BatchNorm(cin)
    if isinstance(layer, L.LayerNorm):
        return LayerNorm(cin)
    return None


#: the layers without parameters, as functions of the layer and its inputs (Dropout is the forward's own)
FUNCTIONS: dict[type, Callable[[L.Layer, list[torch.Tensor]], torch.Tensor]] = {
    L.ReLU: lambda _, xs: F.relu(xs[0]),
    L.GELU: lambda _, xs: F.gelu(xs[0]),  # the exact erf form, torch's default
    L.Tanh: lambda _, xs: torch.tanh(xs[0]),
    L.Sigmoid: lambda _, xs: torch.sigmoid(xs[0]),
    L.MaxPool2d: lambda layer, xs: F.max_pool2d(xs[0], layer.kernel_size, layer.step),
    L.AvgPool2d: lambda layer, xs: F.avg_pool2d(xs[0], layer.kernel_size, layer.step),
    L.GlobalAvgPool: lambda _, xs: xs[0].mean(dim=(2, 3)),
    L.Flatten: lambda _, xs: xs[0].flatten(1),
    L.Add: lambda _, xs: functools.reduce(operator.add, xs),
    L.Concat: lambda _, xs: torch.cat(xs, 1),
}


class Network(nn.Module):
    """``spec.graph`` run node by node; ``masks`` (node -> this shard's Dropout multipliers) in training."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        shapes = spec.graph.shapes(spec.in_shape)
        last_reader = {name: i for i, node in enumerate(spec.graph.nodes) for name in node.inputs}
        self._steps = []  # (node name, layer, input names, has a module, outputs nobody reads after this node)
        for i, node in enumerate(spec.graph.nodes):
            module = _module(node.layer, shapes[node.inputs[0]][0])
            if module is not None:
                self._add(node.name, module)
            elif not isinstance(node.layer, L.Dropout) and type(node.layer) not in FUNCTIONS:
                raise MultidevError(f"the torch engine cannot build {node.layer.where(node.name)}: "
                                    f"upgrade multidev-torch")
            done = tuple(n for n in dict.fromkeys(node.inputs) if last_reader[n] == i)
            self._steps.append((node.name, node.layer, node.inputs, module is not None, done))

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
        for name, layer, inputs, has_module, done in self._steps:
            xs = [outs[n] for n in inputs]
            if has_module:  # looked up each time, so a module swapped in (model surgery) is the one that runs
                out = self.get_submodule(name)(xs[0])
            elif isinstance(layer, L.Dropout):
                out = xs[0] * self._mask(name, masks, xs[0]) if self.training else xs[0]
            else:
                out = FUNCTIONS[type(layer)](layer, xs)
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
