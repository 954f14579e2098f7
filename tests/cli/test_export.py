"""``multidev export CHECKPOINT --onnx OUT``: the trained model for inference, with the engine's logits."""

import numpy as np
import pytest

from multidev import nn, reference
from multidev.cli import main
from multidev.data import synthetic
from multidev.outputs import checkpoint as ckpt
from multidev.testing.fake import FakeEngine
from multidev.training.api import train

ort = pytest.importorskip("onnxruntime", reason="onnxruntime runs the exported file")
pytest.importorskip("onnx", reason="export writes ONNX with the onnx package")


def test_export_runs_in_onnxruntime_with_the_trained_logits(tmp_path, capsys):
    data = synthetic(n_train=32, n_test=8, shape=(1, 8, 8))
    net = nn.Sequential(nn.Conv2d(4, 3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(),
                        nn.Residual(nn.Conv2d(4, 3, padding=1), nn.GELU()), nn.MaxPool2d(2), nn.Dropout(0.3),
                        nn.Flatten(), nn.Dense())
    train(FakeEngine(), model=net, dataset=data, epochs=1, batch_size=8, checkpoint=tmp_path / "ck.npz")
    assert main(["export", str(tmp_path / "ck.npz"), "--onnx", str(tmp_path / "net.onnx")]) == 0
    assert "wrote" in capsys.readouterr().out
    spec, state, _ = ckpt.load(tmp_path / "ck.npz")
    x = data.x_test.astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], {"input": x})
    want = reference.predict(spec, state, x, np.float32)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


def test_export_of_a_missing_checkpoint_is_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path / "none.npz"), "--onnx", str(tmp_path / "x.onnx")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
