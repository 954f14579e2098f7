"""The host's overlap with the step: the same job with the next minibatch placed during the step, and without.

Alternating runs of ``multidev train`` (prefetch on, then ``--no-prefetch``),
median seconds per epoch of each and their ratio, per engine and device
count. A ratio at or below 1.0 means the background placement costs the
step nothing on this machine; on a GPU it hides the host's work.
``--switch no-late-sums`` times the other overlap the same way: each
update's loss read once the next update is queued (the default), against
read as the update ends.

    python -m bench.bench_prefetch --backends torch,jax,mxnet --devices 1,2 --epochs 2 --rounds 2
    python -m bench.bench_prefetch --switch no-late-sums --backends torch,jax,mxnet
"""

from __future__ import annotations

from bench import harness
from bench.bench_processes import run

SMOKE = {"backends": "torch", "devices": "1", "epochs": 1, "rounds": 1, "model": "mlp"}


def main() -> None:
    p = harness.parser(__doc__)
    p.add_argument("--backends", default="torch")
    p.add_argument("--devices", default="1,2")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--switch", default="no-prefetch", choices=("no-prefetch", "no-late-sums"),
                   help="the command-line switch that turns the overlap off")
    args = harness.parse(p, SMOKE)
    report = harness.report(__file__, args, f"{args.model} on digits, {args.epochs} epoch(s), median of "
                            f"{args.rounds} round(s), the default against --{args.switch}")
    for backend in args.backends.split(","):
        for k in args.devices.split(","):
            contenders = {"default": lambda: run(backend, ["--devices", k], args.epochs, args.model, "digits")[0],
                          "switched": lambda: run(backend, ["--devices", k, f"--{args.switch}"], args.epochs,
                                                  args.model, "digits")[0]}
            got = harness.medians(harness.rounds(contenders, args.rounds))
            report.add({"engine": backend, "devices": int(k), "default s/epoch": got["default"],
                        f"--{args.switch} s/epoch": got["switched"],
                        "ratio (default / switched)": got["default"] / got["switched"]})
    report.save()


if __name__ == "__main__":
    main()
