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
- the seconds per epoch and that against the replicated run of the same
  engine and form (``none``): what the level costs. They come from one more
  fresh process that trains every level in turn, ``--rounds`` times in
  alternating order, ``--epochs`` epochs a run, and keeps each level's median
  epoch after a run's first (which carries the warm-up): between processes the
  same run's epoch moved by 10-30% here, within one process by a few;
- in one process, the step alone: every level's replicas built side by side
  in one more fresh process, ``--steps`` untimed steps of each, then 2 *
  ``--rounds`` rounds of ``--steps`` steps of each in turn; the median
  round's step and that against ``none``: what a level changes, without the
  epoch's evaluation and data loading, and with the levels alternated every
  few steps rather than every run.

    python -m bench.bench_sharding --backends torch,jax,mxnet --model resnet18 --devices 4 --processes 2
"""

from __future__ import annotations

import resource
import statistics

from bench import harness
from bench.harness.memory import mib

SMOKE = {"backends": "torch", "model": "mlp", "levels": "none,parameters", "processes": 0, "devices": 2, "epochs": 1,
         "rounds": 1, "steps": 1, "batch": 16}
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


def train(backend: str, model: str, level: str, devices: int, processes: int, epochs: int):
    import multidev

    return multidev.train(backend, model=model, dataset="digits", epochs=epochs, devices=devices,
                          processes=processes, shard=level, optimizer="adamw", lr=1e-3, progress=False)


def worker(backend: str, model: str, level: str, devices: int, processes: int) -> dict:
    """One level's memory: one epoch in this (fresh) process, its peak and what each device holds."""
    if processes == 1:  # a job's workers share the cores out instead (1 thread each on 2 cores), as the command's do
        harness.as_the_command()
    result = train(backend, model, level, devices, processes, 1)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB: the largest worker's peak
    row = {"peak": mib("VmHWM") if processes == 1 else workers, "memory": result.memory,
           "test_acc": result.test_acc}
    if processes == 1:
        row["held"] = held(backend, model, level, devices)
    return row


def timer(backend: str, model: str, levels: list[str], devices: int, processes: int, epochs: int,
          rounds: int) -> dict[str, float]:
    """Every level's median epoch after a run's first, the levels trained in turn in this (fresh) process."""
    if processes == 1:
        harness.as_the_command()
    seconds: dict[str, list[float]] = {level: [] for level in levels}
    for r in range(rounds):
        for level in levels if r % 2 == 0 else levels[::-1]:
            epochs_run = train(backend, model, level, devices, processes, epochs).epochs
            seconds[level] += [e.seconds for e in epochs_run[1:] or epochs_run]
    return {level: statistics.median(s) for level, s in seconds.items()}


def stepper(backend: str, model: str, levels: list[str], devices: int, batch: int, steps: int,
            rounds: int) -> dict[str, float]:
    """Every level's median step (seconds) on ``devices`` devices of this (fresh) process, their replicas side by
    side and stepped in turn (``harness.compare``: ``steps`` untimed steps each, then alternating rounds)."""
    harness.as_the_command()
    import multidev
    from multidev.rules.optimizers import Optimizer

    from bench.jax_peers import synthetic_batch

    engine = multidev.load_backend(backend)
    placed = tuple(harness.run_devices(engine, devices))
    spec = multidev.ModelSpec(model, (1, 8, 8), 10)  # the embedded digits' shape
    optimizer = Optimizer("adamw")
    reps = {level: multidev.replicate(engine, multidev.Setup(spec, placed, optimizer=optimizer, shard=level,
                                                             rows=batch), spec.init(0)) for level in levels}
    x, y = synthetic_batch({"batch": batch, "size": 8})
    cut = multidev.cut(x, y, multidev.shard_sizes(batch, devices))
    # each step returns once its sums are read
    contenders = {level: (lambda r=r: r.train_step(r.place(cut), 1e-3)) for level, r in reps.items()}
    rates = harness.compare(contenders, batch=batch, steps=steps, repeats=2 * rounds, warmup=steps)
    return {level: batch / rate for level, rate in rates.items()}


def mb(values: list[int]) -> float:
    return max(values) / 2**20 if values else float("nan")


def main() -> None:
    p = harness.parser(__doc__)
    p.add_argument("--backends", default="torch,jax,mxnet")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--levels", default=LEVELS)
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--processes", type=int, default=2, help="0: no run over processes")
    p.add_argument("--epochs", type=int, default=3, help="epochs of each timed run (the first is not counted)")
    p.add_argument("--rounds", type=int, default=2, help="timed runs of each level, in alternating order")
    p.add_argument("--steps", type=int, default=4, help="steps of a level in a row, timing the step alone")
    p.add_argument("--batch", type=int, default=128, help="rows a step, timing the step alone (the run's default)")
    args = harness.parse(p, SMOKE)
    report = harness.report(__file__, args, f"{args.model} with AdamW on digits: {args.devices} devices in one "
                            f"process, then {args.processes} processes x 1 device; time: the median epoch after "
                            f"the first of {args.rounds} runs of {args.epochs} epochs per level, levels in turn; "
                            f"the step alone (one process): the median of {2 * args.rounds} rounds of {args.steps} "
                            f"steps of {args.batch} rows per level, levels in turn, after {args.steps} untimed steps each")
    forms = [(args.devices, 1)] + ([(1, args.processes)] if args.processes > 1 else [])
    levels = args.levels.split(",")
    for backend in args.backends.split(","):
        for devices, processes in forms:
            form = {"engine": backend, "form": f"{processes}p x{devices}"}
            try:
                seconds = harness.fresh(timer, label=f"{backend} timed", backend=backend, model=args.model,
                                        levels=levels, devices=devices, processes=processes, epochs=args.epochs,
                                        rounds=args.rounds)
                steps = harness.fresh(stepper, label=f"{backend} steps", backend=backend, model=args.model,
                                      levels=levels, devices=devices, batch=args.batch, steps=args.steps,
                                      rounds=args.rounds) if processes == 1 else {}
            except harness.ChildFailed as failed:
                report.add({**form, "shard": "all", "failed": str(failed)})
                continue
            for level in levels:
                try:
                    row = harness.fresh(worker, label=f"{backend} {level}", backend=backend, model=args.model,
                                        level=level, devices=devices, processes=processes)
                except harness.ChildFailed as failed:
                    report.add({**form, "shard": level, "failed": str(failed)})
                    continue
                report.add({**form, "shard": level, **memory(row), "s/epoch": seconds[level],
                            "time / none": seconds[level] / seconds["none"] if "none" in seconds else float("nan"),
                            **step_columns(steps, level), "test acc": row["test_acc"]})
    report.save()


def step_columns(steps: dict[str, float], level: str) -> dict[str, float]:
    """The step alone (one process): its median milliseconds and that against ``none``'s."""
    if level not in steps:
        return {"step ms": float("nan"), "step / none": float("nan")}
    return {"step ms": 1e3 * steps[level],
            "step / none": steps[level] / steps["none"] if "none" in steps else float("nan")}


def memory(row: dict) -> dict[str, float]:
    """A level's columns of bytes: the engine's own arrays where it reports them, else the result's rule."""
    held = row.get("held") or []
    return {"params MiB/device": mb([h["parameters"] for h in held]) if held else mb(row["memory"]["parameters"]),
            "grads MiB/device": mb(row["memory"]["gradients"]),
            "optimizer MiB/device": mb([h["optimizer"] for h in held]) if held else mb(row["memory"]["optimizer"]),
            "peak RSS MiB": row["peak"]}


if __name__ == "__main__":
    main()
