"""Fixtures of the model-language tests: torchvision's model builders and their ONNX files, where torchvision is
installed."""

import importlib.util
import warnings

import pytest


def _import_torchvision(torch):
    """torchvision, its C++ operators declared first where its binary does not match this torch."""
    from multidev.testing.torchvision import load_torchvision

    return load_torchvision()


@pytest.fixture(scope="session")
def torchvision_models():
    """``torchvision.models``; the test is skipped where torch or torchvision is not installed."""
    torch = pytest.importorskip("torch", reason="torch is not installed: no network to export")
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed (pip install --no-deps torchvision, beside this torch)")
    return _import_torchvision(torch).models


def classifier(models, name: str):
    """torchvision's classifier with 10 classes, in eval mode, made to show what an import could miss: no parameter
    0 (biases start so: one read as missing would go unseen), BatchNorm statistics and norm scales away from the
    identity, ConvNeXt's layer scales near 1 (not 1e-6, which would hide its blocks), a ViT head that is not 0."""
    import torch

    torch.manual_seed(0)
    if name == "vit":
        model = models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                         mlp_dim=64, num_classes=10)
    else:
        extra = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
        model = getattr(models, name)(weights=None, num_classes=10, **extra)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
        for key, p in model.named_parameters():
            if p.ndim and not p.any():
                p.normal_(0, 0.02)
            if key.endswith("layer_scale"):
                p.uniform_(0.5, 1.5)
            elif key.startswith("heads.") or key == "class_token":
                p.normal_(0, 0.1)
    return model.eval()


def export(net, path, in_shape, opset: int = 17, batch: int = 2, dynamic: bool = True, training: bool = False) -> str:
    """torch's TorchScript export as a user writes it (``dynamo=False``, no constant folding), torch's notes on
    that exporter silenced; ``dynamic``: the input named "input" with a dynamic batch axis "N"."""
    import torch

    names = {"input_names": ["input"], "dynamic_axes": {"input": {0: "N"}}} if dynamic else {}
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(batch, *in_shape), str(path), dynamo=False, do_constant_folding=False,
                          training=mode, opset_version=opset, **names)
    return str(path)


@pytest.fixture(scope="session")
def torch_export():
    """:func:`export`, for the tests' modules (conftest is not imported by name under importlib's import mode)."""
    return export


@pytest.fixture(scope="session")
def exported_classifier(torchvision_models, tmp_path_factory):
    """(name, input size) -> (torch's module, its ONNX file), exported once a session by the TorchScript exporter
    as a user would (opset 17, no constant folding, a batch of 1); the module is shared: copy it to change it."""
    made: dict = {}

    def get(name: str, size: int):
        if (name, size) not in made:
            model, path = classifier(torchvision_models, name), tmp_path_factory.mktemp(name) / f"{name}.onnx"
            export(model, path, (3, size, size), batch=1, dynamic=False)
            made[name, size] = model, path
        return made[name, size]
    return get
