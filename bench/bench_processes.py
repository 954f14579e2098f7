"""One job as 2 processes x 1 device against 1 process x 2 devices, on the same cores, per engine.

For every engine that claims ``multi_process``: the epoch time of both forms
(``multidev train`` runs, alternating rounds, medians), their ratio, the
start-up seconds of each (the command's wall time less its epochs), and the
seconds one sum of the model's gradients takes between two processes, each
way the engine can send it (``bench/process_sums.py``: the framework's own
runtime, or shared memory).

    python -m bench.bench_processes --backends torch --epochs 2 --rounds 3
    python -m bench.bench_processes --backends torch,jax,mxnet --images 28 --samples 512

The sum of the gradients does not depend on the images: digits' 8x8 make a
step short, the book's 28x28 (``--images 28``, random images of that size
written to a .npz file) long, against the same sum.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import harness, process_sums

import multidev  # noqa: I001

SMOKE = {"backends": "torch,jax,mxnet", "model": "mlp", "epochs": 1, "rounds": 1, "images": 8, "samples": 64,
         "batch_size": 32, "repeats": 1}
FORMS = {"2 processes x 1 device": ["--processes", "2", "--devices", "1"], "1 process x 2 devices": ["--devices", "2"]}


def images_file(folder: str, size: int, samples: int) -> str:
    """A .npz data set of ``samples`` random ``size`` x ``size`` gray images in 10 classes (a quarter as many to
    test)."""
    rng = np.random.default_rng(0)
    path = str(Path(folder) / f"images{size}.npz")
    np.savez(path, **{f"x_{part}": rng.normal(size=(n, 1, size, size)).astype(np.float32) for part, n in
                      (("train", samples), ("test", samples // 4))},
             **{f"y_{part}": rng.integers(0, 10, n) for part, n in (("train", samples), ("test", samples // 4))})
    return path


def run(backend: str, form: list[str], epochs: int, model: str, data: str,
        extra: tuple[str, ...] = ()) -> tuple[float, float]:
    """(seconds per epoch, start-up seconds) of one ``multidev train`` run."""
    meet = ["--master", f"127.0.0.1:{process_sums.free_port()}"] if "--processes" in form else []  # no other job's
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "multidev", "train", "--backend", backend, "--model", model,
                               "--dataset", data, "--epochs", str(epochs), "--no-progress", "--json", str(out),
                               *form, *meet, *extra], capture_output=True, text=True)
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if line.strip()][-4:] or [f"exit {done.returncode}"]
            raise harness.ChildFailed(f"multidev train --backend {backend} {' '.join(form)}: " + "\n".join(said))
        wall = time.perf_counter() - start
        result = json.loads(out.read_text())
    trained = sum(e["seconds"] for e in result["epochs"])
    return result["sec_per_epoch"], wall - trained


def parse():
    p = harness.parser(__doc__)
    p.add_argument("--backends", default="torch")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--images", type=int, default=0, help="random square images of this size instead of digits")
    p.add_argument("--samples", type=int, default=512, help="training images with --images")
    p.add_argument("--batch-size", type=int, help="the runs' batch size (default: the command's)")
    p.add_argument("--repeats", type=int, default=5, help="timed sums of the gradients between two processes")
    return harness.parse(p, SMOKE)


def main() -> None:
    args = parse()
    side = args.images or 8
    spec = multidev.ModelSpec(args.model, (1, side, side), 10)
    numel = sum(int(np.prod(p.shape)) for p in spec.params() if p.trainable)
    what = f"{args.samples} random {side}x{side} images" if args.images else "digits"
    report = harness.report(__file__, args, f"{args.model} on {what}, {args.epochs} epoch(s) a run, {args.rounds} "
                            f"alternating round(s), {harness.machine.usable_cores()} cores; sums of {numel} floats")
    extra = ["--batch-size", str(args.batch_size)] if args.batch_size else []
    with tempfile.TemporaryDirectory() as folder:
        data = images_file(folder, args.images, args.samples) if args.images else "digits"
        for backend in args.backends.split(","):
            if "multi_process" not in multidev.load_backend(backend).capabilities:
                report.note(f"{backend}: does not claim multi_process")
                continue
            contenders = {name: (lambda form=form: run(backend, form, args.epochs, args.model, data, extra))
                          for name, form in FORMS.items()}
            runs = harness.rounds(contenders, args.rounds)
            ways = process_sums.seconds(backend, numel, args.repeats)
            for row in rows(backend, runs, ways):
                report.add(row)
    report.save()


def rows(backend: str, runs: dict[str, list[tuple[float, float]]], ways: dict[str, float]) -> list[dict]:
    """The two forms' rows: medians of epoch and start-up seconds; the ratio and the sums on the first."""
    median = {name: harness.medians({"epoch": [r[0] for r in got], "startup": [r[1] for r in got]})
              for name, got in runs.items()}
    ratio = median["1 process x 2 devices"]["epoch"] / median["2 processes x 1 device"]["epoch"]
    sums = ", ".join(f"{way} {seconds:.3f}" for way, seconds in ways.items())
    return [{"engine": backend, "form": name, "sec/epoch": m["epoch"], "start-up s": m["startup"],
             "speed of 2 processes / 1 process": ratio if name.startswith("2") else None,
             "sum of the gradients between 2 processes, s each way": sums if name.startswith("2") else None}
            for name, m in median.items()]


if __name__ == "__main__":
    main()
