"""The book's job shape on a GPU: ResNet-18, 60,000 28x28 training images, batch 256, lr 0.1.

Fashion-MNIST itself cannot be fetched on the benchmark machine, so the data
are synthetic images of the same shape and count; the time per epoch depends
on the shape, not the pixels. Prints sec/epoch per engine and precision, the
share of the GPU's peak it reaches, and the targets of issue 13: float32 at
most 5.9 s an epoch (the book's best one-GPU figure), bf16 at most 3.0 s
(faster than the book's two-GPU 3.7 s).

    python bench/bench_fashion_shape.py --backends torch,jax --gpus 1 --epochs 2 --precisions fp32,bf16

``--torch-forms default,none,channels_last`` times the torch engine's GPU
forms (``multidev_torch.gpu``) against each other in one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flops import training_flops  # noqa: E402

import multidev  # noqa: E402
from multidev.rules.models import ModelSpec

TARGETS = {"fp32": 5.9, "bf16": 3.0}
#: dense peak TFLOP/s by GPU name (vendor data sheets; SXM parts): float32 without TF32, TF32 and bf16 on tensor
#: cores (without the sparsity the sheets' larger figures assume)
PEAKS = {"H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.0}, "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.0},
         "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0}}


def peak(precision: str) -> float | None:
    try:
        import torch
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    except ImportError:
        return None
    return next((p[precision] for gpu, p in PEAKS.items() if gpu in name), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--train", type=int, default=60000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--precisions", default="fp32", help="comma-separated: fp32, bf16")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 in the fp32 runs")
    parser.add_argument("--torch-forms", default="default",
                        help="torch: comma-separated variants of the engine's GPU forms to time, each 'default', "
                             "'none' or forms joined by '+' (benchmark, channels_last), e.g. "
                             "default,none,benchmark+channels_last (MULTIDEV_TORCH_GPU_FORMS for each)")
    parser.add_argument("--jax-env", default="default",
                        help="JAX: semicolon-separated variants to time, each 'default' or VAR=value set for that run, "
                             "e.g. 'default;MULTIDEV_JAX_SUMS=reduce'")
    parser.add_argument("--worker-timeout", type=float, default=300, help="seconds each engine and precision may take")
    parser.add_argument("--worker", nargs=2, metavar=("BACKEND", "PRECISION"), help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        backend, precision = args.worker
        data = multidev.data.synthetic(n_train=args.train, n_test=args.test, shape=(1, 28, 28))
        result = multidev.train(backend, gpus=args.gpus, model="resnet18", dataset=data, epochs=args.epochs,
                                batch_size=args.batch, lr=args.lr, precision=precision, tf32=args.tf32)
        secs = [e.seconds for e in result.epochs]
        best = min(secs)
        work = training_flops(ModelSpec("resnet18", (1, 28, 28), 10)) * args.train / best / 1e12
        top = peak("tf32" if args.tf32 and precision == "fp32" else precision)
        share = f"{100 * work / top:.1f}% of {top:.0f}" if top else "peak unknown"
        verdict = "met" if best <= TARGETS[precision] else "missed"
        label = precision + (" tf32" if args.tf32 and precision == "fp32" else "")
        if backend == "torch":
            from multidev_torch import gpu
            label += f" [{'+'.join(sorted(gpu.chosen(precision, True))) or 'none'}" \
                     f"{'' if os.environ.get(gpu.ENV) else ', default'}]"
        elif args.variant:
            label += f" [{args.variant}]"
        print(f"| {backend} | {label} | "
              f"{', '.join(result.devices)} | {', '.join(f'{s:.1f}' for s in secs)} | {work:.1f} TFLOP/s, {share} "
              f"| {result.compile_seconds:.1f} | {TARGETS[precision]} s: {verdict} |", flush=True)
        return
    print(f"# ResNet-18, {args.train} x 1x28x28, batch {args.batch}, lr {args.lr}; {platform.node()}")
    print("| engine | precision | devices | sec per epoch (each) | reached (best epoch) | compile s | target |\n"
          "|---|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        for precision in args.precisions.split(","):
            for variant in _variants(args, backend):
                _worker(args, backend, precision, variant)


def _variants(args: argparse.Namespace, backend: str) -> list[dict[str, str]]:
    """The environments to time ``backend`` in: each a set of variables changed from this one's."""
    if backend == "torch":
        return [{} if forms == "default" else {"MULTIDEV_TORCH_GPU_FORMS": forms}
                for forms in args.torch_forms.split(",")]
    if backend == "jax":
        return [{} if item.strip() == "default" else dict([item.strip().split("=", 1)])
                for item in args.jax_env.split(";") if item.strip()]
    return [{}]


def _worker(args: argparse.Namespace, backend: str, precision: str, variant: dict[str, str]) -> None:
    """One engine, precision and environment in a fresh process (its own GPU memory and compile caches)."""
    text = " ".join(f"{k}={v}" for k, v in variant.items())
    command = [sys.executable, __file__, "--worker", backend, precision, "--gpus", str(args.gpus),
               "--epochs", str(args.epochs), "--batch", str(args.batch), "--lr", str(args.lr),
               "--train", str(args.train), "--test", str(args.test), "--variant", text] \
        + (["--tf32"] if args.tf32 else [])
    env = {k: v for k, v in os.environ.items() if k != "MULTIDEV_TORCH_GPU_FORMS"}
    env.update(variant)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.worker_timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"| {backend} | {precision} {text} | timed out after {args.worker_timeout:.0f} s | | | | |", flush=True)
        return
    lines = proc.stdout.strip().splitlines()
    print(lines[-1] if proc.returncode == 0 and lines else
          f"| {backend} | {precision} {text} | failed: {proc.stderr.strip().splitlines()[-1:]} | | | | |", flush=True)


if __name__ == "__main__":
    main()
