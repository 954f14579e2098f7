"""The host's overlap with the step: the same job with the next minibatch placed during the step, and without.

Alternating runs of ``multidev train`` (prefetch on, then ``--no-prefetch``),
median seconds per epoch of each and their ratio, per engine and device
count. A ratio at or below 1.0 means the background placement costs the
step nothing on this machine; on a GPU it hides the host's work.
``--switch no-late-sums`` times the other overlap the same way: each
update's loss read once the next update is queued (the default), against
read as the update ends.

    python bench/bench_prefetch.py --backends torch,jax,mxnet --devices 1,2 --epochs 2 --rounds 2
    python bench/bench_prefetch.py --switch no-late-sums --backends torch,jax,mxnet
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_processes import run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="torch")
    parser.add_argument("--devices", default="1,2")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--switch", default="no-prefetch", choices=("no-prefetch", "no-late-sums"),
                        help="the command-line switch that turns the overlap off")
    args = parser.parse_args()
    print(f"# {args.model} on digits, {args.epochs} epochs, median of {args.rounds} rounds; {platform.node()}")
    print(f"| engine | devices | default s/epoch | --{args.switch} s/epoch | ratio (default / switched) |\n"
          "|---|---|---|---|---|")
    for backend in args.backends.split(","):
        for k in args.devices.split(","):
            on, off = [], []
            for _ in range(args.rounds):
                on.append(run(backend, ["--devices", k], args.epochs, args.model, "digits")[0])
                off.append(run(backend, ["--devices", k, f"--{args.switch}"], args.epochs, args.model, "digits")[0])
            a, b = statistics.median(on), statistics.median(off)
            print(f"| {backend} | {k} | {a:.2f} | {b:.2f} | {a / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
