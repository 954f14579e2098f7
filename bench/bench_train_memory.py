"""A training run's resident memory per engine, epoch by epoch: the peak, and whether it grows.

Each engine trains ResNet-18 on the embedded digits for ``--epochs`` epochs
(``multidev.train``, one process, ``--devices`` devices) in a fresh process.
After every epoch (``on_epoch``) the worker reads its resident set from
/proc/self/status (VmRSS now, VmHWM the peak so far); the table shows the
peak, RSS after epoch 2 and after the last, and their ratio: memory that
grows epoch after epoch (a cache keyed by something that changes, a history
kept on the device) shows there, and must stay within 5%.

    python bench/bench_train_memory.py --backends torch,jax,mxnet --epochs 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_memory import status  # noqa: E402 - /proc/self/status, in KiB


def _mib(key: str) -> float:
    """VmRSS (now) or VmHWM (the peak so far) of this process, in MiB."""
    return status()[key] / 1024


def worker(backend: str, epochs: int, devices: int, model: str) -> dict:
    from multidev.processes.threads import apply_threads

    apply_threads()  # as the multidev command does
    import multidev

    after: list[float] = []
    result = multidev.train(backend, model=model, epochs=epochs, devices=devices, progress=False,
                            on_epoch=lambda *_: after.append(_mib("VmRSS")))
    return {"rss_after_epoch": after, "peak": _mib("VmHWM"), "test_acc": result.test_acc}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch,jax,mxnet")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.epochs, args.devices, args.model)))
        return
    print(f"# {args.model} on digits, {args.epochs} epochs, {args.devices} device(s), one process per engine; "
          f"{platform.machine()}, {os.cpu_count()} cores, {date.today()}")
    print(f"| engine | peak RSS MiB | RSS after epoch 2 | after epoch {args.epochs} | "
          f"epoch {args.epochs} / epoch 2 | test acc |")
    print("|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        proc = subprocess.run([sys.executable, __file__, "--worker", backend, "--epochs", str(args.epochs),
                               "--devices", str(args.devices), "--model", args.model],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"| {backend} | failed: {proc.stderr.strip().splitlines()[-1:]} | | | | |")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rss = row["rss_after_epoch"]
        second, last = rss[min(1, len(rss) - 1)], rss[-1]
        print(f"| {backend} | {row['peak']:.0f} | {second:.0f} | {last:.0f} | {last / second:.3f} | "
              f"{row['test_acc']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
