"""contract: Data: the user's data, augmented and normalised by the core, reaches every engine as the same numbers.

The core reads, decodes, augments and normalises each minibatch before an
engine sees it, so an engine's float64 steps on augmented data are the
truth's steps (the fake engine: the reference arithmetic) on the same
pixels, on every device count; and a folder of image files trains as the
arrays of its pixels do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from multidev import nn
from multidev.data import arrays, digits, synthetic
from multidev.outputs import checkpoint as ckpt
from multidev.rules.models import State
from multidev.testing._helpers import assert_states_close
from multidev.testing.fake import FakeEngine
from multidev.testing.images import as_uint8_images, write_images
from multidev.testing.kit import CROSS_ENGINE_RTOL, FLOAT64_RTOL, SAME_ENGINE_RTOL, EngineFixtures
from multidev.training.api import train

#: 40 images of 3 x 8 x 8 in batches of 8: five steps an epoch, every sample cropped and maybe flipped
AUGMENTED = dict(batch_size=8, epochs=1, lr=0.1, augment="crop,flip", normalize="auto", progress=False)


def _net() -> nn.Sequential:
    # Tanh, no ReLU: a float32 engine's rounding moves no kink, so only the arithmetic is judged
    # no bias before BatchNorm: its gradient is 0 in exact arithmetic, so its value after 5 steps is rounding noise
    return nn.Sequential(nn.Conv2d(4, 3, padding=1, bias=False), nn.BatchNorm(), nn.Tanh(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dense())


def digits_folder(root: Path) -> Path:
    """scikit-learn's digits as a folder of PNG files, train/ and test/, one class folder per digit."""
    data = digits()
    write_images(root, as_uint8_images(data.x_train), data.y_train, split="train")
    write_images(root, as_uint8_images(data.x_test), data.y_test, split="test")
    return root


class DataChecks(EngineFixtures):
    """contract: Data: augmentation and image folders give an engine the numbers the core gives the truth."""

    def _steps(self, engine, k: int, path: Path, dtype: str) -> State:
        data = synthetic(n_train=40, n_test=8, shape=(3, 8, 8), seed=2)
        train(engine, model=_net(), dataset=data, devices=k, dtype=dtype, checkpoint=path, **AUGMENTED)
        return ckpt.load(path)[1]

    def test_augmented_steps_equal_float64_truth(self, engine, tmp_path):
        dtype, rtol = ("float64", FLOAT64_RTOL) if "float64" in engine.capabilities else ("float32",
                                                                                          CROSS_ENGINE_RTOL)
        for k in self.among(engine, (1, 2)):
            got = self._steps(engine, k, tmp_path / f"engine{k}.npz", dtype)
            want = self._steps(FakeEngine(), k, tmp_path / f"truth{k}.npz", "float64")
            assert_states_close(got, want, rtol=rtol, promise=f"data: 5 steps on crops and flips with --normalize "
                                                              f"auto ({dtype}, {k} device(s)) are not the truth's")

    @pytest.mark.slow
    def test_image_folder_trains_as_its_arrays(self, engine, tmp_path):
        folder = digits_folder(tmp_path / "digits")
        pixels = digits()
        same = arrays(as_uint8_images(pixels.x_train)[:, None], pixels.y_train,
                      as_uint8_images(pixels.x_test)[:, None], pixels.y_test)
        k = min(2, max(self.counts(engine)))
        run = dict(model="mlp", devices=k, epochs=4, batch_size=64, lr=0.1, progress=False)
        from_files = train(engine, dataset=str(folder), checkpoint=tmp_path / "files.npz", **run)
        from_arrays = train(engine, dataset=_in_folder_order(same), checkpoint=tmp_path / "arrays.npz", **run)
        assert from_files.epochs[-1].test_acc >= 0.85, from_files.epochs[-1]
        assert abs(from_files.epochs[-1].test_acc - from_arrays.epochs[-1].test_acc) <= 1 / len(pixels.y_test), (
            "data: a folder of PNG files does not reach the accuracy of the arrays of its pixels")
        assert_states_close(ckpt.load(tmp_path / "files.npz")[1], ckpt.load(tmp_path / "arrays.npz")[1],
                            rtol=SAME_ENGINE_RTOL, promise="data: a folder of PNG files trains otherwise than "
                                                           "the arrays of its pixels")


def _in_folder_order(data):
    """The arrays sorted as a folder lists its files: by class, then by name (the original order)."""
    train, test = np.argsort(data.y_train, kind="stable"), np.argsort(data.y_test, kind="stable")
    return arrays(np.asarray(data.x_train)[train], data.y_train[train], np.asarray(data.x_test)[test],
                  data.y_test[test])

