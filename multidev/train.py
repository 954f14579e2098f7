"""The training loop every engine shares: data, split, steps, evaluation, checkpoints."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from . import checkpoint as ckpt
from .data import Dataset, batches, epoch_order, load_dataset, num_batches
from .devices import DeviceSpec, resolve_devices
from .errors import MultidevError
from .divergence import Trace
from .group import DEFAULT_MASTER, Job, Launch, digest, differing, from_environment
from .interrupt import Interrupted, stop_at_step_boundary
from .models import ModelSpec
from .optim import check_state
from .prefetch import ahead
from .protocol import (Backend, Replicas, Setup, check_batchnorm, check_claims, check_dtype, check_precision,
                       replicate)
from .recipe import Recipe
from .registry import engine_version, load_backend
from .result import EpochRecord, Result
from .shard import shard_sizes

#: The quick start's settings: ResNet-18 on digits passes 0.95 test accuracy in well under two minutes here.
DEFAULTS = {"backend": "torch", "model": "resnet18", "dataset": "digits", "epochs": 10, "batch_size": 128,
            "lr": 0.1, "seed": 0, "batchnorm": "local"}


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise MultidevError(f"{what} must be a whole number of at least 1, got {value!r}")
    return int(value)


def check_settings(*, epochs: object, batch_size: object, lr: object, batchnorm: str) -> None:
    _positive_int(epochs, "epochs")
    _positive_int(batch_size, "batch size")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise MultidevError(f"learning rate must be a positive finite number, got {lr!r}")
    check_batchnorm(batchnorm)


def evaluate(replicas: Replicas, x: np.ndarray, y: np.ndarray, batch_size: int,
             weights: Optional[Sequence[float]] = None, job: Job = Job()) -> tuple[float, float, int]:
    """(mean loss, accuracy, samples counted) over a whole set, in parallel on every device of every process."""
    k = len(replicas.setup.devices)
    sums = np.zeros(3)
    for idx in batches(np.arange(len(x)), batch_size):
        sizes = shard_sizes(len(idx), k * job.group.size, weights)
        stats = replicas.evaluate(replicas.place(job.shards(x, y, idx, sizes, k)))
        sums += (stats.loss_sum, stats.correct, stats.count)
    loss, correct, total = job.all_sum(sums)  # each process counted its own rows
    total = int(round(total))
    if total != len(x):  # contract: Evaluation: an engine that drops or repeats samples is broken, not the user
        raise RuntimeError(f"evaluation counted {total} samples, the set has {len(x)}")
    return loss / max(total, 1), correct / max(total, 1), total


@dataclass
class Position:
    """Where an epoch stands after ``step`` steps: what a mid-epoch checkpoint must carry to resume exactly."""

    epoch: int
    step: int = 0
    loss: float = 0.0
    correct: int = 0
    seen: int = 0
    seconds: float = 0.0


def train_epoch(replicas: Replicas, data: Dataset, *, epoch: int, seed: int, batch_size: int, lr: float,
                weights: Optional[Sequence[float]] = None, progress: bool = False,
                start: Optional[Position] = None, stop: object = False,
                on_step: Optional[Callable[[int, bool], None]] = None, job: Job = Job(),
                rate: Optional[Callable[[int], float]] = None, accumulate: int = 1,
                prefetch: bool = True) -> tuple[float, float, float]:
    """One pass over the training set; returns (mean loss, accuracy, seconds without compilation).

    An update takes ``accumulate`` micro-batches of ``batch_size`` rows (the
    last ones of an epoch shorter) at the rate ``rate(step)`` (step counted in
    the epoch; ``lr`` when None). The next micro-batch is placed while the
    current one runs (``prefetch``). ``start`` resumes mid-epoch; when ``stop``
    turns true between two updates the epoch ends early by raising
    :class:`_Stopped` with its position. ``on_step(step, last_of_epoch)`` runs
    after every update. In a job of several processes every rank stops at the
    same step when any of them got the signal.
    """
    k = len(replicas.setup.devices)
    at = start or Position(epoch)
    order = epoch_order(len(data.x_train), seed, epoch)
    total_steps = num_batches(len(order), batch_size * accumulate)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=total_steps, initial=at.step, desc=f"epoch {epoch}", unit="batch", leave=False)
    compiled_before = replicas.compile_seconds
    clock = time.perf_counter()

    def seconds() -> float:
        return at.seconds + time.perf_counter() - clock - (replicas.compile_seconds - compiled_before)

    done = at.step

    def micro_batches():
        for step, idx in enumerate(batches(order, batch_size * accumulate), start=1):
            if step > done:
                parts = list(batches(idx, batch_size))
                for j, part in enumerate(parts):
                    yield step, j == len(parts) - 1, part, len(idx) if accumulate > 1 else None

    def place(item):
        step, last, part, whole = item
        sizes = shard_sizes(len(part), k * job.group.size, weights)
        return step, last, replicas.place(job.shards(data.x_train, data.y_train, part, sizes, k, whole))

    sums = np.zeros(3)
    try:
        for step, last, placed in ahead(place, micro_batches(), depth=1 if prefetch else 0):
            step_lr = lr if rate is None else rate(step)
            stats = (replicas.train_step(placed, step_lr) if accumulate == 1 else
                     replicas.train_step(placed, step_lr, update=last))
            sums += (stats.loss_sum, stats.correct, stats.count)
            if not last:
                continue
            loss_sum, correct, count, stopping = job.all_sum(np.append(sums, float(bool(stop))))
            sums = np.zeros(3)
            if not math.isfinite(loss_sum):
                raise MultidevError(f"training diverged at epoch {epoch}, step {step} (the loss is "
                                    f"{loss_sum}): lower the learning rate; the checkpoint on disk, if "
                                    f"any, is from before")
            at = Position(epoch, step, at.loss + loss_sum, at.correct + int(correct), at.seen + int(count), at.seconds)
            if bar is not None:
                bar.update()
                bar.set_postfix(loss=f"{at.loss / at.seen:.3f}", refresh=False)
            if on_step is not None:
                on_step(step, step == total_steps)
            if stopping and step < total_steps:
                at.seconds = seconds()
                raise _Stopped(at)
    finally:
        if bar is not None:
            bar.close()
    return at.loss / at.seen, at.correct / at.seen, seconds()


class _Stopped(Exception):
    def __init__(self, position: Position) -> None:
        self.position = position


def train(backend: str | Backend = DEFAULTS["backend"], *, gpus: object = None, devices: DeviceSpec = None,
          model: str = DEFAULTS["model"], dataset: str | Dataset = DEFAULTS["dataset"],
          data_dir: Optional[str | Path] = None, epochs: int = DEFAULTS["epochs"],
          batch_size: int = DEFAULTS["batch_size"], lr: float = DEFAULTS["lr"], seed: int = DEFAULTS["seed"],
          batchnorm: str = DEFAULTS["batchnorm"], shard_weights: Optional[Sequence[float]] = None,
          checkpoint: Optional[str | Path] = None, resume: Optional[str | Path] = None,
          progress: bool = False, on_epoch: Optional[Callable[[EpochRecord], None]] = None,
          dtype: str = "float32", trace: Optional[str | Path] = None, processes: int = 1, nnodes: int = 1,
          node_rank: int = 0, master: str = DEFAULT_MASTER, json_path: Optional[str | Path] = None,
          optimizer: str = "sgd", momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
          betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8, schedule: str = "constant",
          milestones: Sequence[int] | str = (), factor: float = 0.1, warmup_steps: int = 0,
          warmup_epochs: float = 0.0, accumulate: int = 1, precision: str = "fp32", tf32: bool = False,
          prefetch: bool = True) -> Result:
    """Train ``model`` on ``dataset`` with ``backend`` in data parallel over the devices asked for.

    SIGINT or SIGTERM stops the run at the next step boundary: the work so far
    goes to ``checkpoint`` (mid-epoch too: ``resume`` continues from that very
    step) and :class:`multidev.Interrupted` is raised. ``dtype="float64"``
    (engines that claim it) gives the truth float32 runs are measured against;
    ``trace`` keeps the parameters of the first steps and of every epoch there
    (``multidev.divergence``). ``backend`` is an installed engine's name or an
    engine object (one not installed, as the conformance kit may test).

    ``processes=N`` runs the job as N worker processes on this machine, each
    with ``devices`` (or ``gpus``) of its own, through the engine's launcher;
    ``nnodes``, ``node_rank`` and ``master`` span machines. A process started
    by torchrun, srun or Ray Train joins its job from the environment instead.
    Rank 0 alone writes ``checkpoint`` and ``json_path``.

    The recipe (docs/contract.md: Optimizers, Learning-rate schedules, Gradient
    accumulation, Mixed precision): ``optimizer`` "sgd" (``momentum``,
    ``nesterov``, ``weight_decay``) or "adamw" (``betas``, ``eps``,
    ``weight_decay``); ``schedule`` "constant", "step" (``milestones``,
    ``factor``) or "cosine", with a linear warm-up of ``warmup_steps`` or
    ``warmup_epochs``; ``accumulate`` micro-batches of ``batch_size`` per
    update; ``precision="bf16"``; ``tf32`` on GPUs. ``prefetch`` places the
    next minibatch while a step runs.
    """
    check_settings(epochs=epochs, batch_size=batch_size, lr=lr, batchnorm=batchnorm)
    check_dtype(dtype)
    recipe = Recipe.of(optimizer=optimizer, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                       betas=betas, eps=eps, schedule=schedule, milestones=milestones, factor=factor,
                       warmup_steps=warmup_steps, warmup_epochs=warmup_epochs, accumulate=accumulate,
                       precision=precision, tf32=tf32)
    check_precision(precision, dtype)
    engine = load_backend(backend) if isinstance(backend, str) else backend
    joined = from_environment()
    settings = dict(gpus=gpus, devices=devices, model=model, dataset=dataset,
                    data_dir=data_dir, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, batchnorm=batchnorm,
                    shard_weights=shard_weights, checkpoint=checkpoint, resume=resume, progress=progress,
                    dtype=dtype, trace=trace, recipe=recipe, prefetch=prefetch)
    if processes > 1 or nnodes > 1:
        recipe.schedule.check_epochs(epochs)  # before any worker starts, not a line from each of them
        if joined is not None:
            raise MultidevError(f"this process is already rank {joined.group.rank} of {joined.group.size} (started "
                                f"by a launcher): drop --processes and --nnodes")
        from .launch import launch_train
        result = launch_train(engine, Launch(processes, nnodes, node_rank, master), settings, json_path)
        for record in result.epochs if on_epoch is not None else []:
            on_epoch(record)
        return result
    if joined is None or joined.group.size == 1:
        result = _run(engine, Job(), **settings, on_epoch=on_epoch)
    else:
        result = _run_in_group(engine, joined, settings, on_epoch)
    if json_path is not None and (joined is None or joined.group.rank == 0):
        from .result import save_json
        save_json(result, json_path)
    return result


def _run_in_group(engine: Backend, joined, settings: dict, on_epoch) -> Result:
    """This worker's share of a job: join the framework's runtime, check that every rank agrees, train."""
    check_claims(engine, frozenset({"multi_process"}))
    engine.join(joined.group, joined.local_rank)  # type: ignore[attr-defined]
    try:
        job = Job(joined.group, engine.all_sum)  # type: ignore[attr-defined]
        digests = [0.0] * joined.group.size
        # Paths may differ between machines (and only rank 0 writes): the settings that shape the training count.
        shaping = {k: v for k, v in settings.items()
                   if k not in ("progress", "checkpoint", "trace", "data_dir", "recipe", "prefetch")}
        shaping["recipe"] = settings["recipe"].settings()
        digests[joined.group.rank] = float(digest(dict(shaping, backend=engine.name,
                                                       resume=settings["resume"] is not None)))
        problem = differing([int(d) for d in job.all_sum(np.array(digests))])
        if problem:
            raise MultidevError(problem)
        if not job.writer:  # one writer, one progress bar, one set of epoch lines
            settings = dict(settings, checkpoint=None, trace=None, progress=False)
            on_epoch = None
        return _run(engine, job, **settings, on_epoch=on_epoch, local_rank=joined.local_rank)
    finally:
        engine.leave()  # type: ignore[attr-defined]


def _run(engine: Backend, job: Job, *, gpus: object, devices: DeviceSpec, model: str, dataset: str | Dataset,
         data_dir: Optional[str | Path], epochs: int, batch_size: int, lr: float, seed: int, batchnorm: str,
         shard_weights: Optional[Sequence[float]], checkpoint: Optional[str | Path], resume: Optional[str | Path],
         progress: bool, on_epoch: Optional[Callable[[EpochRecord], None]], dtype: str,
         trace: Optional[str | Path], recipe: Recipe, prefetch: bool, local_rank: int = 0) -> Result:
    chosen = resolve_devices(gpus=gpus, devices=devices, gpu_count=engine.gpu_count(),
                             max_cpu=engine.max_cpu_devices(), first_gpu=local_rank)
    if shard_weights is not None:
        shard_sizes(0, len(chosen) * job.group.size, shard_weights)  # validates the weights up front
    data = dataset if isinstance(dataset, Dataset) else load_dataset(dataset, data_dir)
    spec = ModelSpec(model, data.shape, data.num_classes)
    state, history, first, position, opt_state = spec.init(seed), [], 1, None, None
    if resume is not None:
        saved_spec, state, meta = ckpt.load(resume)
        if saved_spec != spec:
            raise MultidevError(f"checkpoint {resume} holds {saved_spec.name} for {saved_spec.in_shape}, "
                                f"this run trains {spec.name} on {dataset!s}: resume with the same settings")
        saved = Recipe.from_settings(meta.get("recipe"))
        if saved.optimizer != recipe.optimizer:
            raise MultidevError(f"checkpoint {resume} was trained with {saved.label() or 'plain sgd'}, this run "
                                f"asks for {recipe.label() or 'plain sgd'}: resume with the same optimizer settings")
        opt_state = ckpt.load_optimizer_state(resume) if not recipe.optimizer.plain else None
        seed, first = int(meta["seed"]), int(meta["epoch"]) + 1
        history = [EpochRecord(**e) for e in meta.get("history", [])]
        if meta.get("position"):
            position = Position(**meta["position"])
            first = position.epoch
        if first > epochs:
            raise MultidevError(f"nothing to train: {resume} is already at epoch {first - 1}; raise --epochs")
    steps_per_epoch = num_batches(len(data.x_train), batch_size * recipe.accumulate)
    recipe.schedule.check(steps_per_epoch, epochs)
    setup = Setup(spec, tuple(chosen), batchnorm, dtype, job.group, optimizer=recipe.optimizer,
                  accumulate=recipe.accumulate, precision=recipe.precision, tf32=recipe.tf32)
    replicas = replicate(engine, setup, state)
    stateful = not recipe.optimizer.plain  # engines that claim optimizers hold state the checkpoint must keep
    if opt_state is not None:
        check_state(recipe.optimizer, spec, opt_state)
        replicas.load_optimizer_state(opt_state)  # type: ignore[attr-defined]
    tracer = Trace(trace, spec) if trace is not None else None
    names = [str(d) for d in chosen] if job.group.size == 1 else [
        f"rank{r}/{d}" for r in range(job.group.size) for d in chosen]
    result = Result(backend=engine.name, devices=names, model=model, dataset=data.name,
                    batch_size=batch_size, lr=float(lr), seed=seed, batchnorm=batchnorm,
                    test_total=len(data.x_test), epochs=history, version=engine_version(engine),
                    recipe=recipe.settings())

    def rate(epoch: int) -> Callable[[int], float]:
        return lambda step: recipe.schedule.rate(lr, (epoch - 1) * steps_per_epoch + step, steps_per_epoch, epochs)

    def save(epoch: int, position: Optional[Position] = None) -> None:
        extra = replicas.optimizer_state() if stateful else {}  # type: ignore[attr-defined]
        ckpt.save(checkpoint, spec, replicas.state(), epoch=epoch, seed=seed, backend=engine.name,
                  history=[vars(e) for e in result.epochs], position=vars(position) if position else None,
                  recipe=recipe.settings(), optimizer_state=extra)

    with stop_at_step_boundary() as stop:
        for epoch in range(first, epochs + 1):
            try:
                loss, train_acc, seconds = train_epoch(
                    replicas, data, epoch=epoch, seed=seed, batch_size=batch_size, lr=lr, weights=shard_weights,
                    progress=progress, start=position if position and position.epoch == epoch else None, stop=stop,
                    on_step=None if tracer is None else
                    lambda step, last, e=epoch: tracer((e - 1) * steps_per_epoch + step, last, replicas), job=job,
                    rate=rate(epoch), accumulate=recipe.accumulate, prefetch=prefetch)
            except _Stopped as stopped:
                if checkpoint is not None:
                    save(epoch - 1, stopped.position)
                raise Interrupted(epoch, stopped.position.step, None if checkpoint is None else str(checkpoint),
                                  stop.signum) from None
            _, test_acc, _ = evaluate(replicas, data.x_test, data.y_test, batch_size, shard_weights, job)
            record = EpochRecord(epoch, loss, train_acc, test_acc, seconds, len(data.x_train) / max(seconds, 1e-9),
                                 [rate(epoch)(step) for step in range(1, steps_per_epoch + 1)])
            result.epochs.append(record)
            if checkpoint is not None:
                save(epoch)
            if on_epoch is not None:
                on_epoch(record)
            if job.all_sum(np.array([float(bool(stop))]))[0] and epoch < epochs:
                raise Interrupted(epoch + 1, 0, None if checkpoint is None else str(checkpoint), stop.signum)
    result.compile_seconds = replicas.compile_seconds
    result.compile_cached = int(getattr(replicas, "compile_cached", 0))
    return result
