"""The table's networks written with Keras 3 layers, channels last, layer for layer torchvision's.

Not ``keras.applications``: its ResNet50 is v1 (the stride on the first 1x1 convolution, biases on every
convolution) and its MobileNetV2 has the stem at stride 2 and another padding, so neither is multidev's network.
A strided convolution is padded as torch pads it (``ZeroPadding2D``, then "valid": Keras' "same" pads one side
only); one at stride 1 is "same", which is torch's. BatchNorm momentum 0.9 and eps 1e-5, exact (erf) GELU.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import layers

from bench.peers.nets import (BN_EPS, BN_MOMENTUM, CLASSES, EXPANSION, LN_EPS, MOBILENET_DROPOUT, MOBILENET_LAST,
                              MOBILENET_STEM, Net)


def conv(z: Any, filters: int, kernel: int, stride: int = 1, *, depthwise: bool = False, bias: bool = False) -> Any:
    """A convolution padded as torch pads it: ``kernel // 2`` on every side (none for a patch embedding's)."""
    pad = kernel // 2
    if stride != 1 and pad:
        z, padding = layers.ZeroPadding2D(pad)(z), "valid"
    else:
        padding = "same" if pad else "valid"
    if depthwise:
        return layers.DepthwiseConv2D(kernel, stride, padding=padding, use_bias=bias)(z)
    return layers.Conv2D(filters, kernel, stride, padding=padding, use_bias=bias)(z)


def norm(z: Any) -> Any:
    """torch's BatchNorm: Keras' defaults (0.99, 1e-3) would average and normalise otherwise."""
    return layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPS)(z)


def relu6(z: Any) -> Any:
    """MobileNetV2's activation (torch's ``ReLU6``)."""
    return layers.ReLU(max_value=6.0)(z)


def bottleneck(z: Any, width: int, stride: int) -> Any:
    """torchvision's ResNet-50 block: 1x1, 3x3 (the stride), 1x1 to 4x the width; a 1x1 projection with BatchNorm."""
    out = EXPANSION * width
    y = layers.ReLU()(norm(conv(z, width, 1)))
    y = layers.ReLU()(norm(conv(y, width, 3, stride)))
    y = norm(conv(y, out, 1))
    if stride != 1 or z.shape[-1] != out:
        z = norm(conv(z, out, 1, stride))
    return layers.ReLU()(layers.Add()([y, z]))


def resnet50(net: Net) -> keras.Model:
    """A 7x7 stem at stride 2 and a 3x3 max pooling, four bottleneck stages, global mean, the classifier."""
    inputs = keras.Input((net.size, net.size, 3))
    z = layers.ReLU()(norm(conv(inputs, 64, 7, 2)))
    z = layers.MaxPooling2D(3, 2)(layers.ZeroPadding2D(1)(z))  # zeros after a ReLU pad as torch's -inf does
    for width, count, stride in net.resnet_stages():
        for i in range(count):
            z = bottleneck(z, width, stride if i == 0 else 1)
    return keras.Model(inputs, layers.Dense(CLASSES)(layers.GlobalAveragePooling2D()(z)))


def inverted_residual(z: Any, cin: int, expansion: int, cout: int, stride: int) -> Any:
    """MobileNetV2's block: 1x1 expansion (none at expansion 1), 3x3 depthwise, 1x1 projection; the input added
    where the shape holds."""
    y = relu6(norm(conv(z, cin * expansion, 1))) if expansion != 1 else z
    y = relu6(norm(conv(y, 0, 3, stride, depthwise=True)))
    y = norm(conv(y, cout, 1))
    return layers.Add()([z, y]) if stride == 1 and cin == cout else y


def mobilenet_v2(net: Net) -> keras.Model:
    """The stem, the inverted residual blocks, a 1x1 convolution to 1280, global mean, Dropout, the classifier."""
    inputs = keras.Input((net.size, net.size, 3))
    width, stride = MOBILENET_STEM
    z = relu6(norm(conv(inputs, width, 3, stride)))
    for block in net.mobilenet_blocks():
        z = inverted_residual(z, *block)
    z = layers.GlobalAveragePooling2D()(relu6(norm(conv(z, MOBILENET_LAST, 1))))
    return keras.Model(inputs, layers.Dense(CLASSES)(layers.Dropout(MOBILENET_DROPOUT)(z)))


class ClassToken(layers.Layer):
    """A learned token (zeros at first) put before the sequence."""

    def build(self, shape: Any) -> None:
        self.token = self.add_weight(shape=(1, 1, shape[-1]), initializer="zeros", name="token")

    def call(self, x: Any) -> Any:
        ops = keras.ops
        return ops.concatenate([ops.broadcast_to(self.token, (ops.shape(x)[0], 1, x.shape[-1])), x], axis=1)


class PositionEmbedding(layers.Layer):
    """A learned (tokens, features) tensor added to every sequence, N(0, 0.02) at first."""

    def build(self, shape: Any) -> None:
        self.position = self.add_weight(shape=(1, *shape[1:]), initializer=keras.initializers.RandomNormal(0, 0.02),
                                        name="position")

    def call(self, x: Any) -> Any:
        return x + self.position


def gelu(x: Any) -> Any:
    """torch's GELU: the exact (erf) form, where Keras' default is the tanh approximation."""
    return keras.ops.gelu(x, approximate=False)


def encoder_block(z: Any, net: Net) -> Any:
    """Pre-norm attention and a GELU MLP, each added to its input (torchvision's ``EncoderBlock``, no dropout)."""
    y = layers.LayerNormalization(epsilon=LN_EPS)(z)
    z = layers.Add()([z, layers.MultiHeadAttention(net.heads, net.dim // net.heads)(y, y)])
    y = layers.Dense(net.mlp, activation=gelu)(layers.LayerNormalization(epsilon=LN_EPS)(z))
    return layers.Add()([z, layers.Dense(net.dim)(y)])


def vit(net: Net) -> keras.Model:
    """Patches embedded by a strided convolution, a class token, a learned position embedding, the blocks, a last
    LayerNorm, the class token's state to the classifier."""
    inputs = keras.Input((net.size, net.size, 3))
    z = layers.Conv2D(net.dim, net.patch, net.patch, padding="valid")(inputs)
    z = PositionEmbedding()(ClassToken()(layers.Reshape((-1, net.dim))(z)))
    for _ in range(net.depth):
        z = encoder_block(z, net)
    z = layers.LayerNormalization(epsilon=LN_EPS)(z)
    return keras.Model(inputs, layers.Dense(CLASSES)(z[:, 0]))


def build(net: Net) -> keras.Model:
    """The Keras model of ``net`` (create it under the distribution it is to train with)."""
    return {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "vit": vit}[net.name](net)
