"""The model language: a network defined once, framework-free, that every engine builds natively.

Layers state their output size only; input shapes come from the data, and
so does the class count of a last ``Dense()``. ``Sequential`` and
``Residual`` write the common shapes, the functional form
(``x = nn.Input(); y = nn.Conv2d(32, 3)(x)``, ``nn.Add``, ``nn.Concat``,
``nn.Model(x, y)``) writes the rest. Every definition flattens to a
``Graph`` of canonically named layers, stored as data in checkpoints.

``layers`` holds the layers; ``graph`` the forms and the flat graph;
``zoo`` the networks multidev ships (``resnet18``, ``lenet``, ``mlp``,
``convnet``); ``onnx`` reads and writes ONNX files (``from_onnx``,
``to_onnx``; the optional onnx package is imported only when they run).
"""

from multidev.nn.graph import Graph, Input, Model, Residual, Sequential
from multidev.nn.layers import (GELU, Add, AvgPool2d, BatchNorm, Concat, Conv2d, Dense, Dropout, Flatten, GlobalAvgPool,
                                HardSigmoid, HardSwish, Layer, LayerNorm, LeakyReLU, MaxPool2d, Mul, ReLU, ReLU6, Sigmoid,
                                SiLU, Tanh)
from multidev.nn.zoo import ZOO, convnet, lenet, mlp, resnet18

__all__ = ["Add", "AvgPool2d", "BatchNorm", "Concat", "Conv2d", "Dense", "Dropout", "Flatten", "GELU",
           "GlobalAvgPool", "Graph", "HardSigmoid", "HardSwish", "Input", "Layer", "LayerNorm", "LeakyReLU",
           "MaxPool2d", "Model", "Mul", "ReLU", "ReLU6", "Residual", "Sequential", "SiLU", "Sigmoid", "Tanh",
           "ZOO", "convnet", "from_onnx", "lenet", "mlp", "resnet18", "to_onnx"]


def __getattr__(name: str):
    """``from_onnx`` and ``to_onnx``, imported on first use: ``import multidev.nn`` stays free of onnx."""
    if name in ("from_onnx", "to_onnx"):
        from multidev.nn import onnx

        return getattr(onnx, name)
    layers = [n for n in __all__ if n[0].isupper() and n not in ("Graph", "Layer", "ZOO")]
    raise AttributeError(f"multidev.nn has no {name!r}: its layers are {', '.join(layers)}")
