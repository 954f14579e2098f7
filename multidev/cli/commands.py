"""The ``multidev`` command line: ``multidev train``, ``multidev backends``."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence

from multidev.data import DATASETS
from multidev.errors import MultidevError
from multidev.processes.launch import DEFAULT_MASTER
from multidev.processes.threads import apply_threads
from multidev.rules.batchnorm import BATCHNORM_MODES
from multidev.rules.models import MODELS
from multidev.rules.precision import DTYPES
from multidev.settings import recipe
from multidev.training.api import DEFAULTS
from multidev.training.interrupt import Interrupted


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
    t.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="float64 (engines that claim it): the truth that float32 runs are measured against")
    t.add_argument("--trace", help="folder to keep the parameters of the first steps and every epoch in")
    t.add_argument("--threads", type=int,
                   help="CPU threads for the frameworks (OMP_NUM_THREADS; default: every usable core, "
                        "shared out among --processes)")
    t.add_argument("--processes", type=int, default=1,
                   help="worker processes on this machine, each with --devices or --gpus of its own")
    t.add_argument("--nnodes", type=int, default=1, help="machines in the job (run the same command on each)")
    t.add_argument("--node-rank", type=int, default=0, help="this machine's number, 0 to nnodes - 1")
    t.add_argument("--master", default=DEFAULT_MASTER, help="HOST:PORT where the workers meet (machine 0)")
    t.add_argument("--no-compile-cache", action="store_true",
                   help="compile afresh: no persistent compilation cache (JAX; MULTIDEV_COMPILE_CACHE=off)")
    t.add_argument("--no-prefetch", action="store_true",
                   help="place each minibatch when its step starts, not during the step before")
    recipe.add_arguments(t)

    c = sub.add_parser("compare", help="the same job on several engines and device counts, side by side")
    c.add_argument("--backends", default="torch", help="comma-separated engines, e.g. torch,jax,mxnet")
    c.add_argument("--devices", default="1,2", help="comma-separated device counts, e.g. 1,2")
    c.add_argument("--out", required=True, help="folder for results.json, results.md and the plots")
    c.add_argument("--timeout", type=float, help="seconds after which a run counts as failed")
    c.add_argument("--no-truth", action="store_true",
                   help="skip the float64 run per device count that float32 runs are measured against")
    c.add_argument("--float64", action="store_true",
                   help="also run every other engine in float64, to tell a flipped ReLU from a different definition")
    for name in ("model", "dataset", "data_dir", "epochs", "batch_size", "lr", "seed", "batchnorm", "threads",
                 "processes"):
        action = next(a for a in t._actions if a.dest == name)
        c.add_argument(*action.option_strings, default=action.default, type=action.type,
                       choices=action.choices, help=action.help)
    recipe.add_arguments(c)

    sub.add_parser("backends", help="list installed engines, versions and devices")
    return parser


def _counts(text: str, flag: str) -> list[int]:
    try:
        counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise MultidevError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise MultidevError(f"{flag} needs device counts of at least 1, got {text!r}")
    return counts


def _compare(args: argparse.Namespace) -> int:
    from multidev.comparison.compare import compare
    from multidev.training.api import check_settings

    check_settings(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, batchnorm=args.batchnorm)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise MultidevError(f"--out {out} is a file: give a folder")
    _writable(str(out / "results.json") if out.is_dir() else str(out), "--out")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    outcomes = compare(backends, _counts(args.devices, "--devices"), out=out, progress=True, timeout=args.timeout,
                       truth=not args.no_truth, float64=args.float64,
                       model=args.model, dataset=args.dataset, data_dir=args.data_dir, epochs=args.epochs,
                       batch_size=args.batch_size, lr=args.lr, seed=args.seed, batchnorm=args.batchnorm,
                       processes=args.processes, recipe=recipe.from_args(args))
    print((out / "results.md").read_text(), end="")
    plots = ", ".join(p.name for p in sorted(out.glob("*.png")))
    print(f"wrote {out}/results.json, results.md, {plots}")
    return 0 if any(o.result for o in outcomes) else 1


def _train(args: argparse.Namespace) -> int:
    from multidev.outputs.plot import plot_accuracy
    from multidev.processes.group import from_environment
    from multidev.training.api import train

    for flag in ("json", "plot", "checkpoint"):
        _writable(getattr(args, flag), f"--{flag}")

    def report(r) -> None:
        print(f"epoch {r.epoch}/{args.epochs}: loss {r.loss:.4f}, train acc {r.train_acc:.3f}, "
              f"test acc {r.test_acc:.3f}, {r.seconds:.1f} sec, {r.samples_per_sec:.0f} samples/sec", flush=True)

    launching = args.processes > 1 or args.nnodes > 1
    joined = from_environment()
    result = train(args.backend, gpus=args.gpus, devices=args.devices, model=args.model, dataset=args.dataset,
                   data_dir=args.data_dir, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                   seed=args.seed, batchnorm=args.batchnorm, checkpoint=args.checkpoint, resume=args.resume,
                   progress=not args.no_progress, on_epoch=None if launching else report, dtype=args.dtype,
                   trace=args.trace, processes=args.processes, nnodes=args.nnodes, node_rank=args.node_rank,
                   master=args.master, json_path=args.json, prefetch=not args.no_prefetch,
                   **recipe.train_kwargs(recipe.from_args(args)))
    if (joined is not None and joined.group.rank != 0) or (launching and args.node_rank != 0):
        return 0  # rank 0 reports for the whole job
    if not launching:  # a launched job's rank 0 has printed these lines itself
        if result.compile_seconds:
            cached = f"; {result.compile_cached} program(s) from the persistent cache" if result.compile_cached else ""
            print(f"compile: {result.compile_seconds:.1f} sec (once, not in the epoch times{cached})")
        print(result.summary())
    if args.plot:
        plot_accuracy([result], args.plot)
    return 0


def _backends() -> int:
    from multidev.engines.registry import engine_version, installed, load_backend

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
            print(f"{name}: {engine_version(engine)}; {seen}; capabilities: {', '.join(sorted(engine.capabilities))}")
            for setting, value in engine.settings().items():
                print(f"  {setting}: {value}")
        except MultidevError as exc:
            print(f"{name}: unusable: {exc}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    warnings.formatwarning = lambda msg, cat, *a, **k: f"multidev: warning: {msg}\n"
    try:
        args = _parser().parse_args(argv)
        apply_threads(getattr(args, "threads", None), share=getattr(args, "processes", 1))
        if getattr(args, "no_compile_cache", False):  # read by engines when a run starts; workers inherit it
            os.environ["MULTIDEV_COMPILE_CACHE"] = "off"
        commands = {"train": _train, "compare": _compare, "backends": lambda _: _backends()}
        return commands[args.command](args)
    except MultidevError as exc:
        print(f"multidev: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as stopped:  # the work is saved; say where and how to go on
        print(f"multidev: {stopped}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("multidev: interrupted", file=sys.stderr)
        return 130
