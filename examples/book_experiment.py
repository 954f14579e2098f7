"""The book's experiment: one device at batch 256 / lr 0.1 against two at batch 512 / lr 0.2.

ResNet-18, 10 epochs, on Fashion-MNIST when its four files are in --data-dir
(or can be downloaded), on the embedded digits otherwise, or on your data
(--dataset: a .npz file, a folder of .npy files or of class folders of
images, cifar-10; --augment crop,flip and --normalize auto as for
`multidev train`). Every engine named runs both settings, each in its own
process, from the same initial weights.

    python examples/book_experiment.py --backends torch,jax,mxnet --out book
    python examples/book_experiment.py --dataset my_photos/ --image-size 32 --augment crop,flip --normalize auto
"""

from __future__ import annotations

import argparse
from pathlib import Path

import multidev
from multidev import Settings
from multidev.comparison.report import write_report
from multidev.data import fashion_mnist


def dataset_available(data_dir: str | None) -> str:
    try:
        fashion_mnist.fetch(data_dir)
        return "fashion-mnist"
    except multidev.MultidevError as exc:
        print(f"Fashion-MNIST not available ({exc}); using digits")
        return "digits"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--data-dir")
    parser.add_argument("--dataset", help="your data instead of Fashion-MNIST (see multidev train --help)")
    parser.add_argument("--image-size", help="an image folder's images resized to this (28, or 32x48)")
    parser.add_argument("--augment", help="crop,flip")
    parser.add_argument("--normalize", help="auto, or MEANS/STDS")
    parser.add_argument("--gpus", action="store_true", help="ask for GPUs (falls back to CPU devices)")
    parser.add_argument("--out", default="book-experiment")
    parser.add_argument("--truth", action="store_true",
                        help="also run each setting in float64 and measure how far the float32 runs part from it")
    args = parser.parse_args()
    dataset = args.dataset or dataset_available(args.data_dir)
    where = "gpus" if args.gpus else "devices"
    data = dict(dataset=dataset, data_dir=args.data_dir, image_size=args.image_size, augment=args.augment,
                normalize=args.normalize)
    runs = [Settings(backend, model="resnet18", epochs=args.epochs, batch_size=batch, lr=lr, **data,
                     **{where: devices})
            for backend in args.backends.split(",") for devices, batch, lr in ((1, 256, 0.1), (2, 512, 0.2))]
    outcomes = multidev.compare(runs=runs, progress=True, truth=args.truth)
    files = write_report(outcomes, Path(args.out))
    print(files["table"].read_text())
    print("wrote", ", ".join(str(p) for p in files.values()))


if __name__ == "__main__":
    main()
