"""The table's networks in PyTorch, from torchvision's own builders: what a torch user trains, and (exported to ONNX)
what multidev's engines build for ResNet-50 and MobileNetV2."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from bench.peers.nets import CLASSES, MOBILENET_DROPOUT, MOBILENET_LAST, MOBILENET_STEM, Net


def build(net: Net) -> Any:
    """torchvision's ``net`` (a ``torch.nn.Module`` in training mode)."""
    from bench.frameworks import load_torchvision

    models = load_torchvision().models
    if net.name == "resnet50":
        return models.resnet.ResNet(models.resnet.Bottleneck, list(net.blocks), num_classes=CLASSES)
    if net.name == "mobilenet_v2":
        return mobilenet_v2(models, net)
    return models.VisionTransformer(image_size=net.size, patch_size=net.patch, num_layers=net.depth,
                                    num_heads=net.heads, hidden_dim=net.dim, mlp_dim=net.mlp, num_classes=CLASSES)


def mobilenet_v2(models: Any, net: Net) -> Any:
    """torchvision's MobileNetV2 on the zoo's stage table, its stem's stride set to the zoo's (torchvision fixes 2)."""
    model = models.MobileNetV2(num_classes=CLASSES, inverted_residual_setting=[list(s) for s in net.stages],
                               dropout=MOBILENET_DROPOUT)
    stem = model.features[0][0]
    assert stem.out_channels == MOBILENET_STEM[0] and model.last_channel == MOBILENET_LAST
    stem.stride = (MOBILENET_STEM[1],) * 2
    return model


def parameters(model: Any) -> int:
    """Trainable values (BatchNorm's running statistics are buffers, not parameters)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def export(name: str, size: int, smoke: bool, path: str) -> str:
    """torchvision's ``name`` written to ``path`` as a user exports it for multidev (docs/guides/your-model.md):
    TorchScript's exporter, opset 17, no constant folding, the batch axis dynamic; in training mode where the network
    has Dropout, which an inference export leaves out."""
    import torch

    torch.manual_seed(0)
    model = build(Net.of(name, size, smoke))
    dropout = any(isinstance(m, torch.nn.Dropout) for m in model.modules())
    mode = torch.onnx.TrainingMode.TRAINING if dropout else torch.onnx.TrainingMode.EVAL
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.train(dropout), torch.zeros(1, 3, size, size), path, dynamo=False,
                          do_constant_folding=False, training=mode, opset_version=17, input_names=["input"],
                          dynamic_axes={"input": {0: "N"}})
    return path


def training_flops(name: str, size: int, smoke: bool) -> int:
    """One sample's floating-point work in a training step: 3 x the forward's (the usual rule, as
    ``bench.harness.flops``), the forward counted by torch's flop counter on torchvision's network (convolutions,
    matrix products, attention: what a GPU's peak is quoted for). Its count of a backward pass is not used: for
    MobileNetV2 it came out 21 times the forward (3.7 against 0.18 GFLOP a sample), where a backward is about 2."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model, batch = build(Net.of(name, size, smoke)).train(), 2
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(batch, 3, size, size))
    return 3 * counter.get_total_flops() // batch
