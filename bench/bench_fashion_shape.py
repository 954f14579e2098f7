"""The book's job shape on a GPU: ResNet-18, 60,000 28x28 training images, batch 256, lr 0.1.

Fashion-MNIST itself cannot be fetched on the benchmark machine, so the data
are synthetic images of the same shape and count; the time per epoch depends
on the shape, not the pixels. Prints sec/epoch per engine.

    python bench/bench_fashion_shape.py --backends torch,jax --gpus 1 --epochs 2
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys

import multidev


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--train", type=int, default=60000)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        data = multidev.data.synthetic(n_train=args.train, n_test=10000, shape=(1, 28, 28))
        result = multidev.train(args.worker, gpus=args.gpus, model="resnet18", dataset=data, epochs=args.epochs,
                                batch_size=args.batch, lr=args.lr)
        secs = ", ".join(f"{e.seconds:.1f}" for e in result.epochs)
        print(f"| {args.worker} | {', '.join(result.devices)} | {secs} | {result.epochs[-1].samples_per_sec:.0f} "
              f"| {result.compile_seconds:.1f} |", flush=True)
        return
    print(f"# ResNet-18, {args.train} x 1x28x28, batch {args.batch}, lr {args.lr}; {platform.node()}")
    print("| engine | devices | sec per epoch (each) | samples/s (last) | compile s |\n|---|---|---|---|---|")
    for backend in args.backends.split(","):
        proc = subprocess.run([sys.executable, __file__, "--worker", backend, "--gpus", str(args.gpus),
                               "--epochs", str(args.epochs), "--batch", str(args.batch), "--lr", str(args.lr),
                               "--train", str(args.train)], capture_output=True, text=True)
        lines = proc.stdout.strip().splitlines()
        print(lines[-1] if proc.returncode == 0 and lines else
              f"| {backend} | failed: {proc.stderr.strip().splitlines()[-1:]} | | | |", flush=True)


if __name__ == "__main__":
    main()
