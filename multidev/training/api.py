"""``multidev.train``: the one call behind the API and the command line, in this process or as a job."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from multidev.data import Dataset
from multidev.engines.protocol import Backend
from multidev.engines.registry import load_backend
from multidev.errors import MultidevError
from multidev.outputs.result import EpochRecord, Result
from multidev.processes.group import from_environment
from multidev.processes.job import Job
from multidev.processes.launch import DEFAULT_MASTER, Launch
from multidev.rules.batchnorm import check_batchnorm
from multidev.rules.devices import DeviceSpec
from multidev.rules.precision import check_dtype, check_precision
from multidev.settings.recipe import Recipe
from multidev.training.run import _run, _run_in_group

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
        from multidev.processes.workers import launch_train
        result = launch_train(engine, Launch(processes, nnodes, node_rank, master), settings, json_path)
        for record in result.epochs if on_epoch is not None else []:
            on_epoch(record)
        return result
    if joined is None or joined.group.size == 1:
        result = _run(engine, Job(), **settings, on_epoch=on_epoch)
    else:
        result = _run_in_group(engine, joined, settings, on_epoch)
    if json_path is not None and (joined is None or joined.group.rank == 0):
        from multidev.outputs.result import save_json
        save_json(result, json_path)
    return result
