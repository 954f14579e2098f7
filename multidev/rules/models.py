"""Canonical model layouts and initial weights (contract: Model and initial weights, §7).

The core owns the parameter names, shapes and tensor layout, and draws the
initial values with numpy from one seed. A model is a definition of
``multidev.nn`` (a zoo network by name, or the user's own); engines build it
with their own layers under these names and load the arrays, so every engine
starts from the same weights and any checkpoint loads anywhere.

Layout: convolution weights are (out, in, kh, kw); dense weights are
(out, in); images are NCHW and flatten in C, H, W order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from multidev.errors import MultidevError
from multidev.nn.graph import Graph
from multidev.nn.layers import Param, State
from multidev.nn.zoo import ZOO

MODELS = tuple(ZOO)

__all__ = ["MODELS", "ModelSpec", "Param", "State"]


@dataclass(frozen=True)
class ModelSpec:
    """A definition for data of ``in_shape`` (C, H, W or F) and ``num_classes``: checked when made.

    ``graph`` None: the zoo's network ``name``; else ``name`` labels the user's definition.
    """

    name: str = field(compare=False)
    in_shape: tuple[int, ...]
    num_classes: int
    graph: Optional[Graph] = None
    _params: tuple[Param, ...] = field(init=False, repr=False, compare=False)
    _dropouts: tuple[tuple[str, float, tuple[int, ...]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        graph = self.graph
        if graph is None:
            if self.name not in ZOO:
                raise MultidevError(f"unknown model {self.name!r}: choose one of {', '.join(MODELS)}, or give "
                                    f"a definition (see README: Your model)")
            graph = ZOO[self.name]().graph()
        graph = graph.resolved(self.num_classes)
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "in_shape", tuple(int(d) for d in self.in_shape))
        object.__setattr__(self, "_params", tuple(graph.params(self.in_shape, self.num_classes)))
        # asked for by every training micro-batch: worked out once
        object.__setattr__(self, "_dropouts", tuple(graph.dropouts(self.in_shape)))

    def params(self) -> list[Param]:
        return list(self._params)

    def trainable(self) -> list[str]:
        return [p.name for p in self._params if p.trainable]

    def statistics(self) -> list[str]:
        return [p.name for p in self._params if not p.trainable]

    def dropouts(self) -> list[tuple[str, float, tuple[int, ...]]]:
        """(node, rate, one sample's shape) of every Dropout layer."""
        return list(self._dropouts)

    def init(self, seed: int) -> State:
        """Normal weights scaled by fan-in, zero biases, unit BatchNorm scale: one numpy stream per seed.

        A definition that came with weights (an imported ONNX file) starts from those instead.
        """
        if self.graph.weights is not None:
            state = {p.name: np.asarray(self.graph.weights[p.name], np.float32) for p in self._params
                     if p.name in self.graph.weights}
            try:
                self.check(state)
            except MultidevError as e:
                raise MultidevError(f"{self.graph.source or 'the definition'}'s weights were made for other inputs "
                                    f"than {self.in_shape} with {self.num_classes} classes ({e}): give data of the "
                                    f"shape and classes it was made for") from None
            return state
        rng = np.random.default_rng(seed)
        state: State = {}
        for p in self._params:
            if p.role in ("conv", "dense"):
                fan_in = int(np.prod(p.shape[1:]))
                gain = 2.0 if p.role == "conv" else 1.0  # He for ReLU convolutions, LeCun for dense
                value = rng.normal(0.0, np.sqrt(gain / fan_in), p.shape)
            elif p.role in ("gamma", "var"):
                value = np.ones(p.shape)
            elif p.role == "position":  # as torchvision's ViT and BERT: small enough not to drown the tokens
                value = rng.normal(0.0, 0.02, p.shape)
            else:
                value = np.zeros(p.shape)
            state[p.name] = value.astype(np.float32)
        return state

    def check(self, state: State) -> None:
        """Raise if ``state`` does not hold exactly this model's arrays."""
        expected = {p.name: p.shape for p in self._params}
        missing = sorted(set(expected) - set(state))
        extra = sorted(set(state) - set(expected))
        if missing or extra:
            raise MultidevError(f"state does not fit {self.name}: missing {missing[:3]}, unexpected {extra[:3]}")
        for name, shape in expected.items():
            if tuple(state[name].shape) != shape:
                raise MultidevError(f"{name} has shape {tuple(state[name].shape)}, {self.name} needs {shape}")
