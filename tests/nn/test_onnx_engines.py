"""A network written in torch, exported to ONNX and imported with nn.from_onnx, on every installed engine.

It must give torch's logits (1e-5) on each engine, from the file's own
weights, and train there from the command line's ``--model net.onnx``.
"""


import numpy as np
import pytest

from multidev import ModelSpec
from multidev.engines.protocol import Setup, replicate
from multidev.engines.registry import installed, load_backend
from multidev.nn.onnx import from_onnx
from multidev.rules.devices import resolve_devices
from multidev.rules.split import cut
from multidev.training.api import train

torch = pytest.importorskip("torch", reason="torch is not installed: no network to export")
pytest.importorskip("onnx", reason="the onnx package is not installed (pip install 'multidev[onnx]')")

ENGINES = [name for name in ("torch", "jax", "mxnet") if name in installed()]


def exported(folder, export) -> tuple[str, np.ndarray, np.ndarray]:
    """(path, images, torch's eval logits) of a small torch network with BatchNorm, a residual add and pooling."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 6, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(6)
            self.conv2 = torch.nn.Conv2d(6, 6, 3, padding=1)
            self.pool = torch.nn.MaxPool2d(2)
            self.fc = torch.nn.Linear(6 * 4 * 4, 10)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return self.fc(torch.flatten(self.pool(y + torch.tanh(self.conv2(y))), 1))

    torch.manual_seed(1)
    net = Net().eval()
    with torch.no_grad():
        net.bn1.running_mean.normal_(0, 0.2)
        net.bn1.running_var.uniform_(0.5, 1.5)
    x = np.random.default_rng(0).normal(size=(5, 1, 8, 8)).astype(np.float32)
    path = export(net, folder / "net.onnx", (1, 8, 8))
    with torch.no_grad():
        return path, x, net(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_imported_torch_network_gives_torchs_logits(engine, tmp_path, torch_export):
    path, x, want = exported(tmp_path, torch_export)
    spec = ModelSpec("net", (1, 8, 8), 10, from_onnx(path))
    backend = load_backend(engine)
    devices = resolve_devices(devices=2, gpu_count=0, max_cpu=backend.max_cpu_devices())
    reps = replicate(backend, Setup(spec, tuple(devices)), spec.init(0))
    got = reps.predict(reps.place(cut(x, None, [3, 2])))
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), engine


@pytest.mark.slow  # an epoch of training on every engine
@pytest.mark.parametrize("engine", ENGINES)
def test_an_imported_torch_network_trains(engine, tmp_path, torch_export):
    path, _, _ = exported(tmp_path, torch_export)
    result = train(engine, model=path, dataset="digits", epochs=1, batch_size=64, lr=0.05)
    assert result.model == "net" and result.epochs[0].test_acc > 0.5
