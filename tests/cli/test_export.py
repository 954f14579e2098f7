"""``multidev export CHECKPOINT --onnx OUT``: the trained model for inference, with the engine's logits."""

import json

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
    before = (tmp_path / "ck.npz").read_bytes()
    assert main(["export", str(tmp_path / "ck.npz"), "--onnx", str(tmp_path / "ck.npz")]) == 2
    assert capsys.readouterr().err == (f"multidev: error: --onnx {tmp_path / 'ck.npz'} is also the checkpoint to "
                                       f"export: writing it would replace it; give another file name\n")
    assert (tmp_path / "ck.npz").read_bytes() == before
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


def test_export_carries_the_runs_normalisation_and_the_class_names(tmp_path, capsys):
    """An image folder trained with --normalize auto: the file takes the images as multidev reads them (pixels
    / 255) and normalises them itself, and names the classes in logit order."""
    from PIL import Image

    from multidev.data import load_dataset
    from multidev.data.transforms import Transforms

    rng = np.random.default_rng(0)
    for c, name in enumerate(["cat", "dog", "eel"]):
        (tmp_path / "pics" / name).mkdir(parents=True)
        for i in range(6):
            pixels = np.clip(rng.normal(60 + 60 * c, 30, (8, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(tmp_path / "pics" / name / f"{i}.png")
    train(FakeEngine(), model="mlp", dataset=str(tmp_path / "pics"), epochs=1, batch_size=4, normalize="auto",
          checkpoint=tmp_path / "ck.npz")
    assert main(["export", str(tmp_path / "ck.npz"), "--onnx", str(tmp_path / "net.onnx")]) == 0
    assert "classes, logit 0 first: cat, dog, eel" in capsys.readouterr().out
    data = load_dataset(str(tmp_path / "pics"))
    x = np.asarray(data.x_test[np.arange(len(data.x_test))], np.float32)
    session = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], {"input": x})
    spec, state, _ = ckpt.load(tmp_path / "ck.npz")
    normalized = Transforms.of((), "auto", data.x_train).test(data.x_test)
    want = reference.predict(spec, state, np.asarray(normalized[np.arange(len(x))], np.float32), np.float32)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
    assert json.loads(session.get_modelmeta().custom_metadata_map["classes"]) == ["cat", "dog", "eel"]
    # read back: the network after the normalisation, and the flag that feeds it alike
    from multidev import nn
    with pytest.warns(UserWarning, match=r"normalises its input itself; .* train it with --normalize [0-9.,]+/"):
        graph = nn.from_onnx(tmp_path / "net.onnx")
    assert [n.layer for n in graph.nodes] == [n.layer for n in spec.graph.nodes]
    # trained from the file: a word where the run's --normalize is not the file's, none where it is
    import warnings
    run = dict(model=str(tmp_path / "net.onnx"), dataset=str(tmp_path / "pics"), epochs=1, batch_size=4)
    with pytest.warns(UserWarning, match="normalises its input itself"):
        train(FakeEngine(), **run)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(FakeEngine(), normalize=graph.normalization, **run)


def test_export_refuses_an_onnx_file_for_a_checkpoint_and_a_file_of_another_kind(tmp_path, capsys):
    (tmp_path / "net.onnx").write_bytes(b"onnx")
    assert main(["export", str(tmp_path / "net.onnx"), "--onnx", str(tmp_path / "x.onnx")]) == 2
    assert "is an ONNX file, not a checkpoint: give the .npz that --checkpoint wrote" in capsys.readouterr().err
    data = synthetic(n_train=16, n_test=4, shape=(1, 4, 4))
    train(FakeEngine(), model="mlp", dataset=data, epochs=1, batch_size=8, checkpoint=tmp_path / "ck.npz")
    (tmp_path / "mine.npz").write_bytes(b"my data")
    assert main(["export", str(tmp_path / "ck.npz"), "--onnx", str(tmp_path / "mine.npz")]) == 2
    assert "exists and is no .onnx file" in capsys.readouterr().err
    assert (tmp_path / "mine.npz").read_bytes() == b"my data"
