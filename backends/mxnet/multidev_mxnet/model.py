"""The book's small-image ResNet-18 and LeNet in Gluon, with the core's canonical names.

Child blocks are attributes named as in the canonical layout, so Gluon's own
structured names (those ``save_parameters`` writes) are the canonical names:
``stem.conv.weight``, ``stage2.block1.proj.bias``, ... MXNet's layouts are the
canonical ones (OIHW convolutions, (out, in) dense, NCHW flattened in C, H, W
order), so loading a state is a copy with no transposes.
"""

from __future__ import annotations

import warnings

from multidev.engine import ModelSpec, lenet_flat_features, resnet18_blocks

from .batchnorm import BatchNorm, StatsExchange
from .runtime import mxnet

mx = mxnet()

nn = mx.gluon.nn


class ConvBN(nn.HybridBlock):
    """The stem: 3x3 convolution (stride 1, padding 1, no bias), BatchNorm, ReLU; no max-pooling."""

    def __init__(self, cin: int, cout: int, sync: bool) -> None:
        super().__init__()
        with self.name_scope():
            self.conv = nn.Conv2D(cout, 3, padding=1, use_bias=False, in_channels=cin)
            self.bn = BatchNorm(cout, sync)

    def hybrid_forward(self, F, x):
        return F.relu(self.bn(self.conv(x)))


class Residual(nn.HybridBlock):
    """The book's residual block; the 1x1 projection has a bias and no BatchNorm."""

    def __init__(self, cin: int, cout: int, stride: int, projection: bool, sync: bool) -> None:
        super().__init__()
        with self.name_scope():
            self.conv1 = nn.Conv2D(cout, 3, strides=stride, padding=1, use_bias=False, in_channels=cin)
            self.bn1 = BatchNorm(cout, sync)
            self.conv2 = nn.Conv2D(cout, 3, padding=1, use_bias=False, in_channels=cout)
            self.bn2 = BatchNorm(cout, sync)
            self.proj = nn.Conv2D(cout, 1, strides=stride, in_channels=cin) if projection else None

    def hybrid_forward(self, F, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.proj is None else self.proj(x)))


class Stage(nn.HybridBlock):
    """Two residual blocks, registered as ``block1`` and ``block2``."""

    def __init__(self, *blocks: Residual) -> None:
        super().__init__()
        self.names = [f"block{i}" for i in range(1, len(blocks) + 1)]
        for name, block in zip(self.names, blocks):
            setattr(self, name, block)  # Gluon registers an attribute block as a child under that name

    def hybrid_forward(self, F, x):
        for name in self.names:
            x = getattr(self, name)(x)
        return x


class ResNet18(nn.HybridBlock):
    def __init__(self, spec: ModelSpec, sync: bool) -> None:
        super().__init__()
        with self.name_scope():
            self.stem = ConvBN(spec.in_shape[0], 64, sync)
            stages: dict[str, list[Residual]] = {}
            for blk in resnet18_blocks():
                stage = blk.prefix.split(".")[0]
                stages.setdefault(stage, []).append(
                    Residual(blk.in_channels, blk.out_channels, blk.stride, blk.projection, sync))
            self.stages = list(stages)
            for name, blocks in stages.items():
                setattr(self, name, Stage(*blocks))
            self.fc = nn.Dense(spec.num_classes, in_units=512)

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        for name in self.stages:
            x = getattr(self, name)(x)
        return self.fc(F.mean(x, axis=(2, 3)))


class LeNet(nn.HybridBlock):
    """The book's LeNet with ReLU: conv3 -> avgpool2 -> conv5 -> avgpool2 -> dense 128 -> dense."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        c, h, w = spec.in_shape
        with self.name_scope():
            self.conv1 = nn.Conv2D(20, 3, in_channels=c)
            self.conv2 = nn.Conv2D(50, 5, in_channels=20)
            self.fc1 = nn.Dense(128, in_units=lenet_flat_features(h, w))
            self.fc2 = nn.Dense(spec.num_classes, in_units=128)

    def hybrid_forward(self, F, x):
        x = F.Pooling(F.relu(self.conv1(x)), kernel=(2, 2), stride=(2, 2), pool_type="avg")
        x = F.Pooling(F.relu(self.conv2(x)), kernel=(2, 2), stride=(2, 2), pool_type="avg")
        return self.fc2(F.relu(self.fc1(x)))  # Dense flattens in C, H, W order


def build(spec: ModelSpec, sync: bool = False) -> nn.HybridBlock:
    """The network; ``sync`` gives its BatchNorm layers what whole-batch statistics need."""
    return ResNet18(spec, sync) if spec.name == "resnet18" else LeNet(spec)


def canonical_params(net: nn.Block, spec: ModelSpec) -> dict:
    """Canonical name -> Gluon Parameter, from the structured names Gluon itself saves under."""
    structured = net._collect_params_with_prefix()  # also holds sync BatchNorm's constants
    missing = [p.name for p in spec.params() if p.name not in structured]
    if missing:
        raise RuntimeError(f"the Gluon {spec.name} lacks canonical parameters {missing[:3]}")
    return {p.name: structured[p.name] for p in spec.params()}


def batchnorms(net: nn.Block) -> list[BatchNorm]:
    found: list[BatchNorm] = []
    net.apply(lambda b: found.append(b) if isinstance(b, BatchNorm) else None)
    return found


def contains_batchnorm(block: nn.Block) -> bool:
    return bool(batchnorms(block))


def hybridize(block: nn.Block, sync: bool) -> None:
    """Compile the whole network; under sync BatchNorm, the largest pieces that hold no BatchNorm.

    Sync BatchNorm exchanges statistics between threads in Python, which a
    compiled graph cannot do; the convolutions around it still run compiled.
    """
    if not (sync and contains_batchnorm(block)):
        if isinstance(block, nn.HybridBlock):
            block.hybridize(static_alloc=True)
        return
    for child in block._children.values():
        hybridize(child, sync)


def trace(net: nn.Block, in_shape: tuple[int, ...], ctx: mx.Context, sync: bool, dtype="float32") -> None:
    """Build the compiled graphs with one call, before any threads use them.

    Gluon builds a hybridized block's graph on its first call, and that step is
    not thread-safe (it races on the name scope); running a built one is. Under
    sync BatchNorm the call is a training-mode one through a one-context
    exchange, so the exchange's own graphs are built too; its statistics are
    dropped, so the running statistics stay untouched.
    """
    x = mx.nd.zeros((2, *in_shape), ctx=ctx, dtype=dtype)
    if not sync:
        net(x).wait_to_read()
        return
    layers = batchnorms(net)
    for bn in layers:
        bn.exchange = StatsExchange([ctx])
    try:
        with mx.autograd.record():
            out = net(x)
        out.wait_to_read()
    finally:
        for bn in layers:
            bn.exchange, bn.batch_statistics = None, None


def bfloat16(net: nn.HybridBlock) -> nn.HybridBlock:
    """``net``'s compiled graph with convolutions and dense layers in bfloat16, on ``net``'s float32 parameters.

    contrib.amp inserts casts to bfloat16 before Convolution and
    FullyConnected (BatchNorm stays float32, as its statistics need); the
    block shares ``net``'s Parameter objects, so gradients, updates and the
    optimizer's state stay float32. Each parameter enters through an
    ``identity``: MXNet 1.9.1's ``amp_cast`` to bfloat16 ignores
    ``grad_req="add"`` (the gradient stays 0), while the identity honours it.
    """
    from mxnet.contrib import amp

    inputs, sym = net._cached_graph
    data = [i.name for i in inputs]
    params = [name for name in sym.list_arguments() if name not in data]
    sym = sym(**{name: mx.sym.identity(mx.sym.var(name), name=f"{name}_in") for name in params})
    converted = amp.convert_symbol(sym, "bfloat16", data_names=data,
                                   fp32_ops=amp.list_fp32_ops(amp.amp.bfloat16) + ["BatchNorm"])
    with warnings.catch_warnings():  # it cannot tell the data's type before a call: float32, as the casts say
        warnings.filterwarnings("ignore", "Cannot decide type", UserWarning)
        block = nn.SymbolBlock(converted, inputs, params=net.collect_params())
    block.hybridize(static_alloc=True)
    return block
