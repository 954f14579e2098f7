"""The book's job shape on a GPU: ResNet-18, 60,000 28x28 training images, batch 256, lr 0.1.

Fashion-MNIST itself cannot be fetched on the benchmark machine, so the data
are synthetic images of the same shape and count; the time per epoch depends
on the shape, not the pixels. Prints sec/epoch per engine and precision, the
share of the GPU's peak it reaches, and the targets of issue 13: float32 at
most 5.9 s an epoch (the book's best one-GPU figure), bf16 at most 3.0 s
(faster than the book's two-GPU 3.7 s). Each engine, precision and variant
trains in a fresh process (``bench.harness.fresh``: its own GPU memory and
compile caches). Without a GPU, ``multidev.train`` falls back to CPU devices
(with a warning): a dry run of the same steps.

    python -m bench.bench_fashion_shape --backends torch,jax --gpus 1 --epochs 2 --precisions fp32,bf16

``--torch-forms default,none,channels_last`` times the torch engine's GPU
forms against each other in one run (``MULTIDEV_TORCH_GPU_FORMS`` for each);
``--jax-env 'default;MULTIDEV_JAX_SUMS=reduce'`` the JAX engine in each
environment given.
"""

from __future__ import annotations

from typing import Any

from bench import harness
from bench.harness.flops import gpu_peak, training_flops

import multidev  # noqa: I001

TARGETS = {"fp32": 5.9, "bf16": 3.0}
SMOKE = {"backends": "torch,jax", "model": "mlp", "epochs": 1, "train": 64, "test": 32, "batch": 32,
         "worker_timeout": 300}


def worker(backend: str, precision: str, options: dict[str, Any]) -> dict[str, Any]:
    """One engine and precision trained in this (fresh) process: its epochs' seconds, devices and forms."""
    data = multidev.data.synthetic(n_train=options["train"], n_test=options["test"], shape=(1, 28, 28))
    result = multidev.train(backend, gpus=options["gpus"], model=options["model"], dataset=data,
                            epochs=options["epochs"], batch_size=options["batch"], lr=options["lr"],
                            precision=precision, tf32=options["tf32"], progress=False)
    forms = multidev.load_backend(backend).settings().get("gpu forms", "") if backend == "torch" else ""
    return {"seconds": [e.seconds for e in result.epochs], "devices": result.devices,
            "compile_s": result.compile_seconds, "forms": forms}


def parse():
    p = harness.parser(__doc__)
    p.add_argument("--backends", default="torch")
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mlp"), help="mlp: a smoke run's")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--train", type=int, default=60000)
    p.add_argument("--test", type=int, default=10000)
    p.add_argument("--precisions", default="fp32", help="comma-separated: fp32, bf16")
    p.add_argument("--tf32", action="store_true", help="allow TF32 in the fp32 runs")
    p.add_argument("--torch-forms", default="default",
                   help="torch: comma-separated variants of the engine's GPU forms to time, each 'default', "
                        "'none' or forms joined by '+' (benchmark, channels_last), e.g. "
                        "default,none,benchmark+channels_last (MULTIDEV_TORCH_GPU_FORMS for each)")
    p.add_argument("--jax-env", default="default",
                   help="JAX: semicolon-separated variants to time, each 'default' or VAR=value set for that run, "
                        "e.g. 'default;MULTIDEV_JAX_SUMS=reduce'")
    p.add_argument("--worker-timeout", type=float, default=300, help="seconds each engine and precision may take")
    return harness.parse(p, SMOKE)


def variants(args, backend: str) -> list[dict[str, str]]:
    """The environments to time ``backend`` in: each a set of variables changed from this one's."""
    if backend == "torch":
        return [{} if forms == "default" else {"MULTIDEV_TORCH_GPU_FORMS": forms}
                for forms in args.torch_forms.split(",")]
    if backend == "jax":
        return [{} if item.strip() == "default" else dict([item.strip().split("=", 1)])
                for item in args.jax_env.split(";") if item.strip()]
    return [{}]


def main() -> None:
    args = parse()
    options = {k: getattr(args, k) for k in ("model", "gpus", "epochs", "batch", "lr", "train", "test", "tf32")}
    report = harness.report(__file__, args, f"{args.model}, {args.train} x 1x28x28, batch {args.batch}, lr "
                            f"{args.lr}, {args.epochs} epoch(s)", gpu=True)
    for backend in args.backends.split(","):
        for precision in args.precisions.split(","):
            for variant in variants(args, backend):
                report.add(time_one(args, options, backend, precision, variant))
    report.save()


def time_one(args, options: dict[str, Any], backend: str, precision: str, variant: dict[str, str]) -> dict:
    """The row of one engine, precision and environment."""
    text = " ".join(f"{k}={v}" for k, v in variant.items()) or "default"
    label = precision + (" tf32" if args.tf32 and precision == "fp32" else "")
    row: dict[str, Any] = {"engine": backend, "precision": label, "variant": text}
    env = {"MULTIDEV_TORCH_GPU_FORMS": None, **variant}  # the variant's forms, not this process's
    try:
        got = harness.fresh(worker, env=env, timeout=args.worker_timeout, label=f"{backend} {label} {text}",
                            backend=backend, precision=precision, options=options)
    except harness.ChildFailed as failed:
        return {**row, "devices": str(failed)}
    best = min(got["seconds"])
    spec = multidev.ModelSpec(args.model, (1, 28, 28), 10)
    work = training_flops(spec) * args.train / best / 1e12
    top = gpu_peak("tf32" if args.tf32 and precision == "fp32" else precision)
    return {**row, "devices": ", ".join(got["devices"]),
            "sec per epoch (each)": ", ".join(f"{s:.1f}" for s in got["seconds"]), "TFLOP/s (best epoch)": work,
            "share of peak": f"{100 * work / top:.1f}% of {top:.0f}" if top else "peak unknown",
            "compile s": got["compile_s"], "target": f"{TARGETS[precision]} s: "
            f"{'met' if best <= TARGETS[precision] else 'missed'}", "engine's GPU forms": got["forms"]}


if __name__ == "__main__":
    main()
