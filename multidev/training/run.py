"""A run in this process: build the replicas, resume, train epoch by epoch, save."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from multidev.data import Dataset, load_dataset, num_batches
from multidev.engines.capabilities import check_claims
from multidev.engines.protocol import Backend, Setup, replicate
from multidev.engines.registry import engine_version
from multidev.errors import MultidevError
from multidev.outputs import checkpoint as ckpt
from multidev.outputs.result import EpochRecord, Result
from multidev.outputs.trace import Trace
from multidev.processes.job import Job, differing, digest
from multidev.rules.devices import DeviceSpec, resolve_devices
from multidev.rules.models import ModelSpec
from multidev.rules.optimizers import check_state
from multidev.rules.split import shard_sizes
from multidev.settings.recipe import Recipe
from multidev.training.evaluate import evaluate
from multidev.training.interrupt import Interrupted, stop_at_step_boundary
from multidev.training.loop import Position, _Stopped, train_epoch


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
