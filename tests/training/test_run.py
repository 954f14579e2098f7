"""A run from its settings: what a resumed run must share with its checkpoint."""

import pytest

from multidev.data import synthetic
from multidev.errors import MultidevError
from multidev.testing import LENET
from multidev.testing.fake import FakeEngine
from multidev.training.api import train


def test_resume_with_another_optimizer_is_refused(tmp_path):
    data = synthetic(n_train=16, n_test=4, shape=LENET.in_shape)
    kwargs = dict(model="lenet", dataset=data, batch_size=8)
    train(FakeEngine(), epochs=1, checkpoint=tmp_path / "c.npz", momentum=0.9, **kwargs)
    with pytest.raises(MultidevError, match="was trained with sgd m0.9, this run asks for adamw"):
        train(FakeEngine(), epochs=2, resume=tmp_path / "c.npz", optimizer="adamw", **kwargs)
