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
from bench.frameworks import load_mxnet

harness.as_the_command()  # as the multidev command does: every usable core, before MXNet loads, for both sides
import multidev  # noqa: E402
from bench.peers.gluon_book import book_step  # noqa: E402  (it loads MXNet)

ENGINE = multidev.load_backend("mxnet")
mx = load_mxnet()
SMOKE = {"model": "mlp", "size": 8, "batch": 4, "steps": 1, "warmup": 1, "rounds": 1, "devices": "1,2"}


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
                               "gluon": book_step(args.model, contexts, x, y, args.lr)},
                              batch=args.batch, steps=args.steps, repeats=args.rounds, warmup=args.warmup)
        report.add({"devices": ", ".join(map(str, devices)), "multidev samples/s": got["multidev"],
                    "hand-written Gluon samples/s": got["gluon"], "multidev / Gluon": got["multidev"] / got["gluon"]})
    report.save()


if __name__ == "__main__":
    main()
