"""The model language: a network defined once, framework-free, that every engine builds natively.

Layers state their output size only; input shapes come from the data, and
so does the class count of a last ``Dense()``. ``Sequential`` and
``Residual`` write the common shapes, the functional form
(``x = nn.Input(); y = nn.Conv2d(32, 3)(x)``, ``nn.Add``, ``nn.Concat``,
``nn.Model(x, y)``) writes the rest. Every definition flattens to a
``Graph`` of canonically named layers, stored as data in checkpoints.

``layers`` holds the layers; ``graph`` the forms and the flat graph;
``zoo`` the networks multidev ships (``resnet18``, ``lenet``, ``mlp``,
``convnet``, ``mobilenet_v2``, ``vit``); ``onnx`` reads and writes ONNX files (``from_onnx``,
``to_onnx``; the optional onnx package is imported only when they run).
"""

from multidev.nn.graph import Graph, Input, Model, Residual, Sequential
from multidev.nn.layers import (GELU, Add, AvgPool2d, BatchNorm, ClassToken, Concat, Conv2d, Dense, Div, DropPath,
                                Dropout, Flatten, GlobalAvgPool, HardSigmoid, HardSwish, Layer, LayerNorm, LeakyReLU,
                                MatMul, MaxPool2d, Mean, Mul, MultiHeadAttention, Pad, PositionEmbedding, ReLU, ReLU6,
                                Reshape, Scale, Sigmoid, SiLU, Slice, Softmax, Sub, Tanh, Transpose, WindowAttention)
from multidev.nn.zoo import ZOO, convnet, lenet, mlp, mobilenet_v2, resnet18, vit

__all__ = ["Add", "AvgPool2d", "BatchNorm", "ClassToken", "Concat", "Conv2d", "Dense", "Div", "DropPath", "Dropout",
           "Flatten", "GELU", "GlobalAvgPool", "Graph", "HardSigmoid", "HardSwish", "Input", "Layer", "LayerNorm",
           "LeakyReLU", "MatMul", "MaxPool2d", "Mean", "Model", "Mul", "MultiHeadAttention", "Pad",
           "PositionEmbedding", "ReLU", "ReLU6", "Reshape", "Residual", "Scale", "Sequential", "SiLU", "Sigmoid",
           "Slice", "Softmax", "Sub", "Tanh", "Transpose", "WindowAttention", "ZOO", "convnet", "from_onnx", "lenet",
           "mlp", "mobilenet_v2", "resnet18", "to_onnx", "vit"]


def __getattr__(name: str):
    """``from_onnx`` and ``to_onnx``, imported on first use: ``import multidev.nn`` stays free of onnx."""
    if name in ("from_onnx", "to_onnx"):
        from multidev.nn import onnx

        return getattr(onnx, name)
    layers = [n for n in __all__ if n[0].isupper() and n not in ("Graph", "Layer", "ZOO")]
    raise AttributeError(f"multidev.nn has no {name!r}: its layers are {', '.join(layers)}")
