"""What each ``--shard`` level saves and costs: bytes per device, each process's peak memory, the step time.

For every engine and level the same job trains in a fresh process
(``bench.harness.fresh``): ``--model`` with AdamW on the embedded digits,
``--devices`` devices in one process, then ``--processes`` processes of one
device each. A row shows

- the bytes one device keeps of the parameters, the reduced gradient and the
  optimizer state, as the engine's own arrays hold them (``held_bytes()``
  after an update; the gradient as the core's rule gives it, the JSON
  result's ``memory``), the largest over the devices;
- the peak resident memory of the process (one process: the training
  process's VmHWM; several: the largest worker's, from ``RUSAGE_CHILDREN``);
- the seconds per epoch, and that against the replicated run of the same
  engine and form (``none``): what the level costs.

    python -m bench.bench_sharding --backends torch,jax,mxnet --model resnet18 --devices 4 --processes 2
"""

from __future__ import annotations

import resource

from bench import harness
from bench.harness.memory import mib

SMOKE = {"backends": "torch", "model": "mlp", "levels": "none,parameters", "processes": 0, "devices": 2}
LEVELS = "none,optimizer,gradients,parameters"


def held(backend: str, model: str, level: str, devices: int) -> list[dict[str, int]]:
    """Each device's bytes of parameters and optimizer state after one update, as the engine's arrays hold them."""
    from multidev.data import load_dataset
    from multidev.engines.protocol import Setup, replicate
    from multidev.engines.registry import load_backend
    from multidev.rules.devices import resolve_devices
    from multidev.rules.optimizers import Optimizer
    from multidev.rules.split import cut, shard_sizes
    from multidev.settings.run import Settings
    from multidev.training.run import model_spec

    engine = load_backend(backend)
    data = load_dataset("digits")
    spec = model_spec(Settings(model=model, dataset="digits"), data)
    chosen = resolve_devices(devices=devices, gpu_count=0, max_cpu=engine.max_cpu_devices())
    reps = replicate(engine, Setup(spec, tuple(chosen), optimizer=Optimizer("adamw"), shard=level), spec.init(0))
    x, y = data.x_train[:64], data.y_train[:64]
    reps.train_step(reps.place(cut(x, y, shard_sizes(len(x), len(chosen)))), lr=1e-3)
    return reps.held_bytes() if hasattr(reps, "held_bytes") else []


def worker(backend: str, model: str, level: str, devices: int, processes: int, epochs: int) -> dict:
    if processes == 1:  # a job's workers share the cores out instead (1 thread each on 2 cores), as the command's do
        harness.as_the_command()
    import multidev

    result = multidev.train(backend, model=model, dataset="digits", epochs=epochs, devices=devices,
                            processes=processes, shard=level, optimizer="adamw", lr=1e-3, progress=False)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB: the largest worker's peak
    row = {"peak": mib("VmHWM") if processes == 1 else workers, "seconds": result.sec_per_epoch,
           "memory": result.memory, "test_acc": result.test_acc}
    if processes == 1:
        row["held"] = held(backend, model, level, devices)
    return row


def mb(values: list[int]) -> float:
    return max(values) / 2**20 if values else float("nan")


def main() -> None:
    p = harness.parser(__doc__)
    p.add_argument("--backends", default="torch,jax,mxnet")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--levels", default=LEVELS)
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--processes", type=int, default=2, help="0: no run over processes")
    p.add_argument("--epochs", type=int, default=1)
    args = harness.parse(p, SMOKE)
    report = harness.report(__file__, args, f"{args.model} with AdamW on digits, {args.epochs} epoch(s): "
                            f"{args.devices} devices in one process, then {args.processes} processes x 1 device")
    forms = [(args.devices, 1)] + ([(1, args.processes)] if args.processes > 1 else [])
    for backend in args.backends.split(","):
        for devices, processes in forms:
            base = None
            for level in args.levels.split(","):
                try:
                    row = harness.fresh(worker, label=f"{backend} {level}", backend=backend, model=args.model,
                                        level=level, devices=devices, processes=processes, epochs=args.epochs)
                except harness.ChildFailed as failed:
                    report.add({"engine": backend, "form": f"{processes}p x{devices}", "shard": level,
                                "failed": str(failed)})
                    continue
                base = row["seconds"] if level == "none" else base
                held = row.get("held") or []
                report.add({"engine": backend, "form": f"{processes}p x{devices}", "shard": level,
                            "params MiB/device": mb([h["parameters"] for h in held]) if held else
                            mb(row["memory"]["parameters"]),
                            "grads MiB/device": mb(row["memory"]["gradients"]),
                            "optimizer MiB/device": mb([h["optimizer"] for h in held]) if held else
                            mb(row["memory"]["optimizer"]),
                            "peak RSS MiB": row["peak"], "s/epoch": row["seconds"],
                            "time / none": row["seconds"] / base if base else float("nan"),
                            "test acc": row["test_acc"]})
    report.save()


if __name__ == "__main__":
    main()
