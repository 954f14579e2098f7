"""A training run's resident memory per engine, epoch by epoch: the peak, and whether it grows.

Each engine trains ResNet-18 on the embedded digits for ``--epochs`` epochs
(``multidev.train``, one process, ``--devices`` devices) in a fresh process
(``bench.harness.fresh``). After every epoch (``on_epoch``) the worker reads
its resident set from /proc/self/status (VmRSS now, VmHWM the peak so far);
the table shows the peak, RSS after epoch 2 and after the last, and their
ratio: memory that grows epoch after epoch (a cache keyed by something that
changes, a history kept on the device) shows there, and must stay within 5%.

    python -m bench.bench_train_memory --backends torch,jax,mxnet --epochs 10
"""

from __future__ import annotations

from bench import harness
from bench.harness.memory import mib

SMOKE = {"backends": "torch,jax,mxnet", "epochs": 2, "model": "mlp"}


def worker(backend: str, epochs: int, devices: int, model: str) -> dict:
    harness.as_the_command()
    import multidev

    after: list[float] = []
    result = multidev.train(backend, model=model, epochs=epochs, devices=devices, progress=False,
                            on_epoch=lambda *_: after.append(mib("VmRSS")))
    return {"rss_after_epoch": after, "peak": mib("VmHWM"), "test_acc": result.test_acc}


def main() -> None:
    p = harness.parser(__doc__)
    p.add_argument("--backends", default="torch,jax,mxnet")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--model", default="resnet18")
    args = harness.parse(p, SMOKE)
    report = harness.report(__file__, args, f"{args.model} on digits, {args.epochs} epochs, {args.devices} "
                            f"device(s), one process per engine")
    for backend in args.backends.split(","):
        try:
            row = harness.fresh(worker, label=backend, backend=backend, epochs=args.epochs, devices=args.devices,
                                model=args.model)
        except harness.ChildFailed as failed:
            report.add({"engine": backend, "peak RSS MiB": f"failed: {failed}"})
            continue
        rss = row["rss_after_epoch"]
        second, last = rss[min(1, len(rss) - 1)], rss[-1]
        report.add({"engine": backend, "peak RSS MiB": row["peak"], "RSS after epoch 2": second,
                    f"after epoch {args.epochs}": last, f"epoch {args.epochs} / epoch 2": last / second,
                    "test acc": row["test_acc"]})
    report.save()


if __name__ == "__main__":
    main()
