"""The ``multidev`` commands: ``train``, ``compare`` and ``backends``, each one line on a user error (exit 2)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence

from multidev.cli.parser import parser
from multidev.errors import MultidevError, PeerLost, UserCodeError
from multidev.outputs.paths import check_paths, writable
from multidev.processes.faults import will_restart
from multidev.processes.threads import apply_threads
from multidev.settings.run import from_args
from multidev.training.interrupt import Interrupted


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

    base = from_args(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise MultidevError(f"--out {out} is a file: give a folder")
    writable(str(out / "results.json") if out.is_dir() else str(out), "--out")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    outcomes = compare(backends, _counts(args.counts, "--devices"), out=out, progress=base.progress,
                       timeout=args.timeout, truth=not args.no_truth, float64=args.float64, settings=base)
    print((out / "results.md").read_text(), end="")
    plots = ", ".join(p.name for p in sorted(out.glob("*.png")))
    print(f"wrote {out}/results.json, results.md, {plots}")
    return 0 if any(o.result for o in outcomes) else 1


def _train(args: argparse.Namespace) -> int:
    from multidev.processes.group import from_environment
    from multidev.training.api import train

    s = from_args(args)

    def report(r) -> None:
        print(f"epoch {r.epoch}/{s.epochs}: loss {r.loss:.4f}, train acc {r.train_acc:.3f}, "
              f"test acc {r.test_acc:.3f}, {r.seconds:.1f} sec, {r.samples_per_sec:.0f} samples/sec", flush=True)

    launching = s.launch.size > 1
    joined = from_environment()
    result = train(settings=s, on_epoch=None if launching else report)
    if (joined is not None and joined.group.rank != 0) or (launching and s.node_rank != 0):
        return 0  # rank 0 reports for the whole job
    if not launching:  # a launched job's rank 0 has printed these lines itself
        if result.compile_seconds:
            cached = f"; {result.compile_cached} program(s) from the persistent cache" if result.compile_cached else ""
            print(f"compile: {result.compile_seconds:.1f} sec (once, not in the epoch times{cached})")
        if result.process_sums:
            print(f"gradients summed over the processes through {result.process_sums}")
        print(result.summary())
    return 0


def _backends() -> int:
    from multidev.engines.registry import engine_version, installed, load_backend
    from multidev.engines.vocabulary import summary

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
            print(f"  {summary(engine)}")
            for setting, value in engine.settings().items():
                print(f"  {setting}: {value}")
        except MultidevError as exc:
            print(f"{name}: unusable: {exc}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from multidev.nn.onnx import to_onnx
    from multidev.outputs import checkpoint as ckpt

    spec, state, meta = ckpt.load(args.checkpoint)
    check_paths({"--onnx": args.onnx}, {}, {"the checkpoint to export": args.checkpoint})
    classes, saved = meta.get("classes"), meta.get("normalization")
    normalization = (saved["mean"], saved["std"]) if saved else None
    to_onnx(spec.graph, state, spec.in_shape, args.onnx, normalization=normalization, classes=classes)
    shape = ", ".join(map(str, spec.in_shape))
    print(f"wrote {args.onnx}: {spec.name} after epoch {meta.get('epoch')}; input 'input' float32 (N, {shape}), "
          f"output 'logits' ({spec.num_classes} classes)")
    scaled = "uint8 values divided by 255 (8-bit images: 0 to 1), other arrays as they are"
    print(f"  input: the samples as multidev reads them: {scaled}" +
          ("; the run's normalisation is inside the file" if normalization else ""))
    if classes:
        print(f"  classes, logit 0 first: {', '.join(classes)} (also in the file's metadata 'classes')")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    warnings.formatwarning = lambda msg, cat, *a, **k: f"multidev: warning: {msg}\n"
    try:
        args, unknown = parser().parse_known_args(argv)
        if unknown:  # said by the command's parser: its --help lists what it takes
            raise MultidevError(f"unrecognized arguments: {' '.join(unknown)} (see `multidev {args.command} --help`)")
        apply_threads(getattr(args, "threads", None), share=getattr(args, "processes", 1))
        if getattr(args, "no_compile_cache", False):  # read by engines when a run starts; workers inherit it
            os.environ["MULTIDEV_COMPILE_CACHE"] = "off"
        commands = {"train": _train, "compare": _compare, "backends": lambda _: _backends(), "export": _export}
        code = commands[args.command](args)
        sys.stdout.flush()  # a reader gone shows here, where it is handled, not in Python's own flush at exit
        return code
    except PeerLost as exc:  # the launcher names the process that ended; when it restarts the job, that is all
        if not will_restart():
            print(f"multidev: error: {exc}", file=sys.stderr)
        return 2
    except UserCodeError as exc:  # the user's program failed, not a mistake multidev caught: Python's exit code
        print(f"multidev: error: {exc}", file=sys.stderr)
        return 1
    except MultidevError as exc:
        print(f"multidev: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as stopped:  # the work is saved; say where and how to go on
        if not stopped.quiet:
            print(f"multidev: {stopped}", file=sys.stderr)
        return 128 + stopped.signum  # as a shell reports a process the signal ended: 130 for Ctrl-C, 143 for SIGTERM
    except KeyboardInterrupt:
        print("multidev: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`multidev backends | head -2`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit would fail again
        return 128 + signal.SIGPIPE
