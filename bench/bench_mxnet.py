"""multidev's MXNet engine against a hand-written Gluon training loop, in one run.

Both train the book's small-image ResNet-18 with SGD on the same synthetic
batch, on the same contexts (one, then two), and read the loss back every step
(as any training loop that reports progress does). The hand-written loop is
the book's concise multi-device recipe: one network initialised on every
context, shards sliced by hand (no ``split_and_load``), one loss per shard,
``Trainer.step`` over a ``device`` kvstore. Samples/s of each and their ratio
are printed; timings alternate between the two in rounds, and the median round
is kept, so load from other processes hits both alike.

    python -m bench.bench_mxnet                      # ~2 minutes on 2 CPU cores
    python -m bench.bench_mxnet --size 32 --batch 256 --steps 10 --rounds 5 --devices 1,2,4
    python -m bench.bench_mxnet --gpus 2             # gpu(0), gpu(1) where they exist
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from bench import harness
from bench.peers.gluon_loop import sharded_step
from bench.frameworks import load_mxnet

harness.as_the_command()  # as the multidev command does: every usable core, before MXNet loads, for both sides
import multidev  # noqa: E402

ENGINE = multidev.load_backend("mxnet")
mx = load_mxnet()
nn, gluon, autograd, nd = mx.gluon.nn, mx.gluon, mx.autograd, mx.nd
SMOKE = {"model": "mlp", "size": 8, "batch": 4, "steps": 1, "warmup": 1, "rounds": 1, "devices": "1,2"}


# The hand-written side: the book's ResNet-18 (d2l "Residual" and "resnet_block"), in plain Gluon.
class Residual(nn.HybridBlock):
    def __init__(self, channels: int, use_1x1conv: bool = False, strides: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2D(channels, kernel_size=3, padding=1, strides=strides, use_bias=False)
        self.conv2 = nn.Conv2D(channels, kernel_size=3, padding=1, use_bias=False)
        self.conv3 = nn.Conv2D(channels, kernel_size=1, strides=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm()
        self.bn2 = nn.BatchNorm()

    def hybrid_forward(self, F, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def resnet18(num_classes: int) -> nn.HybridSequential:
    def block(channels: int, first_block: bool = False) -> nn.HybridSequential:
        blk = nn.HybridSequential()
        for i in range(2):
            down = i == 0 and not first_block
            blk.add(Residual(channels, use_1x1conv=down, strides=2 if down else 1))
        return blk

    net = nn.HybridSequential()
    net.add(nn.Conv2D(64, kernel_size=3, strides=1, padding=1, use_bias=False), nn.BatchNorm(),
            nn.Activation("relu"))
    net.add(block(64, first_block=True), block(128), block(256), block(512))
    net.add(nn.GlobalAvgPool2D(), nn.Dense(num_classes))
    return net


def mlp(num_classes: int) -> nn.HybridSequential:
    """multidev's ``mlp`` (a smoke run's): two hidden layers of 256 (Gluon's Dense flattens the image)."""
    net = nn.HybridSequential()
    net.add(nn.Dense(256, activation="relu"), nn.Dense(256, activation="relu"), nn.Dense(num_classes))
    return net


def hand_written(model: str, contexts: list, x: np.ndarray, y: np.ndarray, lr: float) -> Callable[[], float]:
    net = resnet18(10) if model == "resnet18" else mlp(10)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize(static_alloc=True)
    return sharded_step(mx, net, contexts, x, y, lr, momentum=0.0)


def engine(model: str, devices: list, x: np.ndarray, y: np.ndarray, lr: float) -> Callable[[], float]:
    spec = multidev.ModelSpec(model, x.shape[1:], 10)
    replicas = multidev.replicate(ENGINE, multidev.Setup(spec, devices), spec.init(0))
    sizes = multidev.shard_sizes(len(x), len(devices))
    return lambda: replicas.train_step(replicas.place(multidev.cut(x, y, sizes)), lr).loss_sum


def parse():
    p = harness.parser(__doc__)
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mlp"),
                   help="the network both train (mlp: a smoke run's)")
    p.add_argument("--size", type=int, default=28, help="image height and width (1 channel)")
    p.add_argument("--batch", type=int, default=64, help="minibatch size over all devices")
    p.add_argument("--steps", type=int, default=4, help="timed steps per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median is kept")
    p.add_argument("--devices", default="1,2", help="device counts to time (virtual CPU devices)")
    p.add_argument("--gpus", type=int, help="time on this many GPUs instead")
    p.add_argument("--lr", type=float, default=0.05)
    return harness.parse(p, SMOKE)


def main() -> None:
    args = parse()
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (args.batch, 1, args.size, args.size)).astype(np.float32)
    y = rng.integers(0, 10, args.batch).astype(np.float32)
    counts = [args.gpus] if args.gpus else [int(k) for k in args.devices.split(",")]
    report = harness.report(__file__, args, f"{args.model}, batch {args.batch} of 1x{args.size}x{args.size}, "
                            f"{args.warmup} warm-up + {args.steps} timed steps x {args.rounds} rounds, losses read "
                            f"every step", gpu=bool(args.gpus))
    for k in counts:
        devices = multidev.resolve_devices(gpus=args.gpus, gpu_count=ENGINE.gpu_count()) if args.gpus else \
            multidev.resolve_devices(devices=k)
        contexts = [mx.gpu(d.index) if d.kind == "gpu" else mx.cpu(d.index) for d in devices]
        got = harness.compare({"multidev": engine(args.model, devices, x, y, args.lr),
                               "gluon": hand_written(args.model, contexts, x, y, args.lr)},
                              batch=args.batch, steps=args.steps, repeats=args.rounds, warmup=args.warmup)
        report.add({"devices": ", ".join(map(str, devices)), "multidev samples/s": got["multidev"],
                    "hand-written Gluon samples/s": got["gluon"], "multidev / Gluon": got["multidev"] / got["gluon"]})
    report.save()


if __name__ == "__main__":
    main()
