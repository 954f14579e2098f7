"""An engine states the layers it builds: a definition beyond them is one line before any replica exists."""

import pytest

from multidev import nn
from multidev.engines.protocol import Setup, replicate
from multidev.engines.vocabulary import check_layers, lacking, summary
from multidev.errors import MultidevError
from multidev.nn.layers import LAYERS
from multidev.rules.devices import resolve_devices
from multidev.rules.models import ModelSpec
from multidev.testing.fake import FakeEngine


class NoAttention(FakeEngine):
    layers = frozenset(LAYERS) - {"MultiHeadAttention", "Mul", "Softmax"}


def test_a_definition_with_a_layer_the_engine_lacks_is_one_line_naming_the_node():
    graph = nn.vit(patch=2, dim=8, depth=1, heads=2, mlp=16).graph()
    with pytest.raises(MultidevError, match=r"^the fake engine does not build MultiHeadAttention "
                       r"'block1.attention.attn': choose an engine that does \(multidev backends lists what each "
                       r"lacks\) or upgrade multidev-fake$"):
        check_layers(NoAttention(), graph)
    check_layers(NoAttention(), nn.resnet18().graph())  # nothing it lacks
    check_layers(FakeEngine(), graph)                   # an engine that states nothing is taken at its word


def test_the_core_checks_before_the_engine_builds():
    engine = NoAttention()
    spec = ModelSpec("vit", (2, 6, 6), 3, nn.vit(patch=2, dim=8, depth=1, heads=2, mlp=16).graph())
    devices = resolve_devices(devices=1, gpu_count=0, max_cpu=None)
    built = []
    engine.replicate = lambda setup, state: built.append(setup)  # the engine's own builder must not be reached
    with pytest.raises(MultidevError, match="does not build MultiHeadAttention"):
        replicate(engine, Setup(spec, tuple(devices)), spec.init(0))
    assert not built


def test_backends_says_what_an_engine_lacks():
    missing = sorted({"MultiHeadAttention", "Mul", "Softmax"} & set(LAYERS))
    assert lacking(NoAttention()) == missing and "Mul" in missing
    assert summary(NoAttention()) == f"layers: {len(LAYERS) - len(missing)} of {len(LAYERS)} (not {', '.join(missing)})"
    assert summary(type("Every", (FakeEngine,), {"layers": frozenset(LAYERS)})()) == f"layers: all {len(LAYERS)}"
    assert summary(FakeEngine()) == "layers: not stated"
