"""The ``multidev`` command line: ``multidev train``, ``multidev backends``."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence

from .data import DATASETS
from .errors import MultidevError
from .models import MODELS
from .protocol import BATCHNORM_MODES
from .train import DEFAULTS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for every other user error
        raise MultidevError(f"{message} (see `{self.prog} --help`)")


def _writable(path: Optional[str], flag: str) -> None:
    """Fail before training, not after it, when an output cannot be written."""
    if path is None:
        return
    folder = Path(path).parent
    if Path(path).is_dir():
        raise MultidevError(f"{flag} {path} is a folder: give a file name")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise MultidevError(f"{flag} {path}: folder {folder} does not exist or is not writable")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="multidev", description="Data-parallel training on PyTorch, JAX and MXNet.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train a model on k devices")
    t.add_argument("--backend", default=DEFAULTS["backend"], help="engine: see `multidev backends`")
    where = t.add_mutually_exclusive_group()
    where.add_argument("--devices", help="k virtual devices, or names: cpu:0,cpu:1")
    where.add_argument("--gpus", type=int, help="k GPUs; falls back to k CPU devices with a warning")
    t.add_argument("--model", default=DEFAULTS["model"], choices=MODELS)
    t.add_argument("--dataset", default=DEFAULTS["dataset"], choices=DATASETS)
    t.add_argument("--data-dir", help="where Fashion-MNIST is kept (default: ~/.cache/multidev/fashion-mnist)")
    t.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    t.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    t.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    t.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    t.add_argument("--batchnorm", default=DEFAULTS["batchnorm"], choices=BATCHNORM_MODES)
    t.add_argument("--json", help="write the result as JSON here")
    t.add_argument("--plot", help="write a PNG of accuracy per epoch here")
    t.add_argument("--checkpoint", help="save the model here after every epoch (atomically)")
    t.add_argument("--resume", help="continue from this checkpoint")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")

    sub.add_parser("backends", help="list installed engines, versions and devices")
    return parser


def _train(args: argparse.Namespace) -> int:
    from .plot import plot_accuracy
    from .result import save_json
    from .train import train

    for flag in ("json", "plot", "checkpoint"):
        _writable(getattr(args, flag), f"--{flag}")

    def report(r) -> None:
        print(f"epoch {r.epoch}/{args.epochs}: loss {r.loss:.4f}, train acc {r.train_acc:.3f}, "
              f"test acc {r.test_acc:.3f}, {r.seconds:.1f} sec, {r.samples_per_sec:.0f} samples/sec", flush=True)

    result = train(args.backend, gpus=args.gpus, devices=args.devices, model=args.model, dataset=args.dataset,
                   data_dir=args.data_dir, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                   seed=args.seed, batchnorm=args.batchnorm, checkpoint=args.checkpoint, resume=args.resume,
                   progress=not args.no_progress, on_epoch=report)
    if result.compile_seconds:
        print(f"compile: {result.compile_seconds:.1f} sec (once, not in the epoch times)")
    print(result.summary())
    if args.json:
        save_json(result, args.json)
    if args.plot:
        plot_accuracy([result], args.plot)
    return 0


def _backends() -> int:
    from .registry import installed, load_backend

    names = installed()
    if not names:
        print("no engines installed: pip install -c constraints.txt ./backends/torch")
        return 1
    for name in names:
        try:
            engine = load_backend(name)
            gpus = engine.gpu_count()
            cpus = engine.max_cpu_devices()
            seen = f"{gpus} GPU(s), " + ("any number of CPU devices" if cpus is None else f"{cpus} CPU device(s)")
            print(f"{name}: {engine.version()}; {seen}; capabilities: {', '.join(sorted(engine.capabilities))}")
        except MultidevError as exc:
            print(f"{name}: unusable: {exc}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    warnings.formatwarning = lambda msg, cat, *a, **k: f"multidev: warning: {msg}\n"
    try:
        args = _parser().parse_args(argv)
        return _train(args) if args.command == "train" else _backends()
    except MultidevError as exc:
        print(f"multidev: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("multidev: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
