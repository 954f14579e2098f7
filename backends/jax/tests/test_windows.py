"""Windows and joins the kit's cases leave out, in float64 against the NumPy truth.

Pools with four-sided, "same" and ceil_mode padding together (explicit pads
of one reduce_window, each window's divisor worked out from the shapes), a
grouped dilated "same" convolution, tiny outputs (conv.py's matrix product)
with four sides under both forms of the convolutions' inputs, and the joins
whose canonical axes are not NHWC's (Concat along H or W, Mul of images by
features).
"""

from __future__ import annotations

from typing import Callable

import pytest

import multidev
from multidev import ModelSpec, load_backend, nn, reference, shard_sizes
from multidev.testing import batch, max_rel_error


def _alone(layer: nn.Layer) -> Callable[[], nn.Model]:
    return lambda: nn.Sequential(layer, nn.Flatten(), nn.Dense())


def _joined(join: nn.Layer) -> nn.Model:
    x = nn.Input()
    images = nn.Conv2d(3, 3, padding=1)(x)
    other = nn.Dense(6)(nn.Flatten()(x)) if isinstance(join, nn.Mul) else nn.Conv2d(3, 1)(x)
    return nn.Model(x, nn.Dense()(nn.Flatten()(join(images, other))))


IMAGES, TINY = (2, 6, 7), (2, 2, 2)
CASES: dict[str, tuple[Callable[[], nn.Model], tuple[int, ...]]] = {
    "MaxPool2d-four-sides-ceil": (_alone(nn.MaxPool2d(3, stride=2, padding=(0, 1, 1, 1), ceil_mode=True)), IMAGES),
    "AvgPool2d-same-not-counted": (_alone(nn.AvgPool2d(3, stride=2, padding="same", count_include_pad=False)),
                                   IMAGES),
    "AvgPool2d-four-sides-ceil": (_alone(nn.AvgPool2d(3, stride=2, padding=(1, 0, 0, 1), ceil_mode=True)), IMAGES),
    "Conv2d-same-dilated-grouped": (_alone(nn.Conv2d(4, 3, padding="same", dilation=2, groups=2)), IMAGES),
    "Conv2d-tiny-four-sides": (_alone(nn.Conv2d(3, 3, stride=2, padding=(0, 1, 1, 2))), TINY),
    "Conv2d-tiny-depthwise": (_alone(nn.Conv2d(4, 3, padding=1, groups=2)), TINY),
    "Concat-H": (lambda: _joined(nn.Concat(axis=1)), IMAGES),
    "Concat-W": (lambda: _joined(nn.Concat(axis=-1)), IMAGES),
    "Mul-images-by-features": (lambda: _joined(nn.Mul()), (2, 6, 6)),
}
#: the convolutions run under both forms of their inputs (the once form changes training only)
FORMS = [(case, "fused") for case in CASES] + [(case, "once") for case in CASES if case.startswith("Conv2d")]


@pytest.mark.parametrize("case, form", FORMS)
def test_the_window_or_join_is_the_float64_truth(monkeypatch, case, form):
    monkeypatch.setenv("MULTIDEV_JAX_CONV_INPUTS", form)
    build, shape = CASES[case]
    spec = ModelSpec(case, shape, 3, build().graph())
    x, y = batch(spec, 7, seed=3)
    state, sizes = spec.init(1), shard_sizes(7, 2)
    engine = load_backend("jax")
    devices = multidev.resolve_devices(devices=2, max_cpu=engine.max_cpu_devices())
    reps = multidev.replicate(engine, multidev.Setup(spec, devices, "local", "float64"), state)
    assert max_rel_error(reps.predict(reps.place(multidev.cut(x, None, sizes))),
                         reference.predict(spec, state, x)) < 1e-10
    got = reps.gradients(reps.place(multidev.cut(x, y, sizes)))
    want = reference.gradients(spec, state, x, y, sizes)
    errors = {name: max_rel_error(got[name], want[name]) for name in want}
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-9, f"{worst} differs by {errors[worst]:.2e} ({form})"


def test_the_engine_states_every_layer_of_the_language():
    """``layers`` (multidev.engines.vocabulary) comes from model.py's own table of builders."""
    from multidev_jax.model import BUILT

    assert load_backend("jax").layers == BUILT >= set(nn.layers.LAYERS), set(nn.layers.LAYERS) - BUILT
