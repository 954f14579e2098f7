"""The layers of the model language: hyperparameters only, each stating its output size, never its input's.

``base`` holds what a layer is; the others group layers by what they do:
``convolution`` (windows over images), ``dense``, ``normalization``,
``activations``, ``joins`` (several inputs, reshaping). ``LAYERS`` names them
all, as a stored definition names them.
"""

from __future__ import annotations

from multidev.nn.layers.activations import (GELU, HardSigmoid, HardSwish, LeakyReLU, ReLU, ReLU6, Sigmoid, SiLU,
                                            Tanh)
from multidev.nn.layers.base import LN_EPS, Layer, Param, Shape, State
from multidev.nn.layers.convolution import AvgPool2d, Conv2d, GlobalAvgPool, MaxPool2d
from multidev.nn.layers.dense import Dense, Dropout
from multidev.nn.layers.joins import Add, Concat, Flatten, Mul, broadcast
from multidev.nn.layers.normalization import BatchNorm, LayerNorm

__all__ = ["Add", "AvgPool2d", "BatchNorm", "Concat", "Conv2d", "Dense", "Dropout", "Flatten", "GELU", "GlobalAvgPool",
           "HardSigmoid", "HardSwish", "LAYERS", "LN_EPS", "Layer", "LayerNorm", "LeakyReLU", "MaxPool2d", "Mul",
           "Param", "ReLU", "ReLU6", "Shape", "SiLU", "Sigmoid", "State", "Tanh", "broadcast"]

LAYERS: dict[str, type[Layer]] = {cls.__name__: cls for cls in (
    Conv2d, Dense, BatchNorm, LayerNorm, ReLU, GELU, Tanh, Sigmoid, ReLU6, LeakyReLU, SiLU, HardSigmoid, HardSwish,
    MaxPool2d, AvgPool2d, GlobalAvgPool, Flatten, Dropout, Add, Mul, Concat)}
