"""The layers of the model language: hyperparameters only, each stating its output size, never its input's.

``base`` holds what a layer is; the others group layers by what they do:
``convolution`` (windows over images), ``dense`` (and dropout),
``normalization``, ``activations``, ``joins`` (several inputs),
``shapes`` (values rearranged), ``reductions``, ``tokens`` (a transformer's
sequences). ``LAYERS`` names them all, as a stored definition names them.
"""

from __future__ import annotations

from multidev.nn.layers.activations import (GELU, HardSigmoid, HardSwish, LeakyReLU, ReLU, ReLU6, Scale, Sigmoid,
                                            SiLU, Softmax, Tanh)
from multidev.nn.layers.base import LN_EPS, Layer, Param, Shape, State
from multidev.nn.layers.convolution import AvgPool2d, Conv2d, GlobalAvgPool, MaxPool2d
from multidev.nn.layers.dense import Dense, DropPath, Dropout
from multidev.nn.layers.joins import Add, Concat, Div, MatMul, Mul, Sub, broadcast
from multidev.nn.layers.normalization import BatchNorm, LayerNorm
from multidev.nn.layers.reductions import Mean
from multidev.nn.layers.shapes import Flatten, Pad, Reshape, Slice, Transpose
from multidev.nn.layers.tokens import ClassToken, MultiHeadAttention, PositionEmbedding, WindowAttention

__all__ = ["Add", "AvgPool2d", "BatchNorm", "ClassToken", "Concat", "Conv2d", "Dense", "Div", "DropPath", "Dropout",
           "Flatten", "GELU", "GlobalAvgPool", "HardSigmoid", "HardSwish", "LAYERS", "LN_EPS", "Layer", "LayerNorm",
           "LeakyReLU", "MatMul", "MaxPool2d", "Mean", "Mul", "MultiHeadAttention", "Pad", "Param", "PositionEmbedding",
           "ReLU", "ReLU6", "Reshape", "Scale", "Shape", "SiLU", "Sigmoid", "Slice", "Softmax", "State", "Sub", "Tanh",
           "Transpose", "WindowAttention", "broadcast"]

LAYERS: dict[str, type[Layer]] = {cls.__name__: cls for cls in (
    Conv2d, Dense, BatchNorm, LayerNorm, ReLU, GELU, Tanh, Sigmoid, ReLU6, LeakyReLU, SiLU, HardSigmoid, HardSwish,
    MaxPool2d, AvgPool2d, GlobalAvgPool, Flatten, Dropout, DropPath, Add, Sub, Mul, Div, Concat, MatMul, Softmax,
    Scale, Reshape, Transpose, Slice, Pad, Mean, ClassToken, PositionEmbedding, MultiHeadAttention, WindowAttention)}
