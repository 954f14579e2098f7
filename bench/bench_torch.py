"""multidev's PyTorch engine against a hand-written PyTorch loop: samples/s and their ratio.

The hand-written loop is what one writes from the book without multidev:
torch's own nn.BatchNorm2d, one optimizer per replica, per-shard
forward/backward, gradients summed into every replica. Same model, batch,
devices and data; both run alternately in this one process.

    python bench/bench_torch.py --devices 1,2 --batch 64 --size 28
"""

from __future__ import annotations

import argparse
import platform
import sys
from datetime import date
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from multidev_torch.batchnorm import BatchNorm  # noqa: E402
from multidev_torch.model import build  # noqa: E402
from timing import compare, table  # noqa: E402

import multidev  # noqa: E402


def plain_torch_model(spec: multidev.ModelSpec) -> nn.Module:
    """The same network with torch's own BatchNorm2d, as a hand-written script would have it."""
    model = build(spec)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, BatchNorm):
                setattr(parent, name, nn.BatchNorm2d(child.gamma.numel()))
    return model


def handwritten_step(spec: multidev.ModelSpec, k: int, x: np.ndarray, y: np.ndarray):
    replicas = [plain_torch_model(spec) for _ in range(k)]
    for r in replicas[1:]:
        r.load_state_dict(replicas[0].state_dict())
    optimizers = [torch.optim.SGD(r.parameters(), lr=0.1) for r in replicas]
    xs = torch.from_numpy(x).tensor_split(k)
    ys = torch.from_numpy(y).tensor_split(k)

    def step() -> None:
        for r, xi, yi in zip(replicas, xs, ys):
            r.zero_grad()
            (F.cross_entropy(r(xi), yi, reduction="sum") / len(x)).backward()
        if k > 1:
            with torch.no_grad():
                for params in zip(*(r.parameters() for r in replicas)):
                    total = sum(p.grad for p in params)
                    for p in params:
                        p.grad.copy_(total)
        for opt in optimizers:
            opt.step()
    return step


def multidev_step(spec: multidev.ModelSpec, k: int, x: np.ndarray, y: np.ndarray):
    engine = multidev.load_backend("torch")
    reps = multidev.replicate(engine, multidev.Setup(spec, multidev.resolve_devices(devices=k)), spec.init(0))
    sizes = multidev.shard_sizes(len(x), k)
    return lambda: reps.train_step(reps.place(multidev.cut(x, y, sizes)), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="1,2")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=28, help="image height and width")
    parser.add_argument("--model", default="resnet18", choices=multidev.MODELS)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = multidev.ModelSpec(args.model, (1, args.size, args.size), 10)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, *spec.in_shape)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    rows = []
    for k in (int(v) for v in args.devices.split(",")):
        got = compare({"hand-written": handwritten_step(spec, k, x, y), "multidev": multidev_step(spec, k, x, y)},
                      batch=args.batch, steps=args.steps, repeats=args.repeats)
        rows.append({"engine": "torch", "devices": k, "hand-written samples/s": got["hand-written"],
                     "multidev samples/s": got["multidev"], "ratio": got["multidev"] / got["hand-written"]})
    print(f"# {args.model} {args.size}x{args.size}, batch {args.batch}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {platform.machine()}, {date.today()}")
    print(table(rows))


if __name__ == "__main__":
    main()
