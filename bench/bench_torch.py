"""multidev's PyTorch engine against a hand-written PyTorch loop: samples/s and their ratio.

The hand-written loop is what one writes from the book without multidev:
the book's ResNet-18 in plain torch (``nn.BatchNorm2d``; ``--model mlp``, a
smoke run's, two hidden layers), one optimizer per
replica, per-shard forward/backward, gradients summed into every replica.
Same model, batch, devices and data; both run alternately in this one
process (``bench.harness.compare``), ``--repeats`` rounds, medians.

    python -m bench.bench_torch --devices 1,2 --batch 64 --size 28
"""

from __future__ import annotations

import numpy as np
import torch

from bench import harness
from bench.peers.torch_book import book_step

import multidev  # noqa: I001  (after the harness: nothing of it loads a framework)

SMOKE = {"model": "mlp", "devices": "1,2", "batch": 4, "size": 8, "steps": 1, "repeats": 1}


def handwritten_step(spec: multidev.ModelSpec, k: int, x: np.ndarray, y: np.ndarray):
    return book_step(spec.name, k, x, y, lr=0.1)


def multidev_step(spec: multidev.ModelSpec, k: int, x: np.ndarray, y: np.ndarray):
    engine = multidev.load_backend("torch")
    reps = multidev.replicate(engine, multidev.Setup(spec, multidev.resolve_devices(devices=k)), spec.init(0))
    sizes = multidev.shard_sizes(len(x), k)
    return lambda: reps.train_step(reps.place(multidev.cut(x, y, sizes)), 0.1)


def main() -> None:
    p = harness.parser(__doc__)
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mlp"),
                   help="the network both train (mlp: a smoke run's)")
    p.add_argument("--devices", default="1,2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=28, help="image height and width")
    p.add_argument("--steps", type=int, default=3, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=3)
    args = harness.parse(p, SMOKE)
    spec = multidev.ModelSpec(args.model, (1, args.size, args.size), 10)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, *spec.in_shape)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    report = harness.report(__file__, args, f"{args.model} {args.size}x{args.size}, batch {args.batch}, "
                            f"{args.repeats} alternating rounds of {args.steps} steps, {torch.get_num_threads()} "
                            f"threads")
    for k in (int(v) for v in args.devices.split(",")):
        got = harness.compare({"hand-written": handwritten_step(spec, k, x, y),
                               "multidev": multidev_step(spec, k, x, y)},
                              batch=args.batch, steps=args.steps, repeats=args.repeats)
        report.add({"engine": "torch", "devices": k, "hand-written samples/s": got["hand-written"],
                    "multidev samples/s": got["multidev"], "multidev / hand-written": got["multidev"] /
                    got["hand-written"]})
    report.save()


if __name__ == "__main__":
    main()
