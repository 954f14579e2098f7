"""``multidev.train``: the one call behind the API and the command line, in this process or as a job."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional

from multidev.engines.protocol import Backend
from multidev.engines.registry import load_backend
from multidev.errors import MultidevError
from multidev.nn import sources
from multidev.outputs.paths import check_paths
from multidev.outputs.result import Result
from multidev.processes.faults import JobStopped, resumes_at
from multidev.processes.group import Joined, from_environment
from multidev.settings import fields
from multidev.settings.run import AUTO, DEFAULTS, Settings, described
from multidev.training.interrupt import Interrupted
from multidev.training.resume import check_unfinished, starting_point
from multidev.training.run import OnEpoch, check_inputs, run_here, run_in_group

__all__ = ["DEFAULTS", "train"]


def _launched(engine: Backend, s: Settings, joined: Optional[Joined], on_epoch: OnEpoch) -> Result:
    """``processes`` / ``nnodes`` above 1: this machine's workers, started by the engine's launcher."""
    s.recipe.schedule.check_epochs(s.epochs)  # before any worker starts, not a line from each of them
    if joined is not None:
        raise MultidevError(f"this process is already rank {joined.group.rank} of {joined.group.size} (started "
                            f"by a launcher): drop --processes and --nnodes")
    if s.resume not in (None, AUTO):  # one line here, not one from each worker
        check_unfinished(s.resume, s.epochs)
    check_inputs(s, s.device_count * s.launch.size)
    from multidev.processes.workers import launch_train
    try:
        result = launch_train(engine, s)
    except JobStopped as stopped:  # every worker stopped at a step boundary; say where the job stands
        raise Interrupted(*resumes_at(s.checkpoint), s.checkpoint, stopped.signum) from None
    for record in result.epochs if on_epoch is not None else []:
        on_epoch(record)
    return result


def _check_paths(s: Settings) -> None:
    """The run's outputs, checked against each other and the files it reads, before anything trains."""
    model = sources.file_of(s.model) if isinstance(s.model, str) else None
    read = {"--dataset": s.dataset, "--model": model, "--resume": None if s.resume == AUTO else s.resume}
    inputs = {flag: path for flag, path in read.items() if isinstance(path, str) and Path(path).exists()}
    check_paths({"--checkpoint": s.checkpoint, "--json": s.json, "--plot": s.plot}, {"--trace": s.trace}, inputs,
                checkpoint="--checkpoint")


def _write(result: Result, s: Settings) -> None:
    if s.json is not None:
        from multidev.outputs.result import save_json
        save_json(result, s.json)
    if s.plot is not None and result.epochs:
        from multidev.outputs.plot import plot_accuracy
        plot_accuracy([result], s.plot)


def train(backend: str | Backend | None = None, *, settings: Optional[Settings] = None, on_epoch: OnEpoch = None,
          **kwargs: Any) -> Result:
    """Train a model in data parallel over the devices asked for, and return the :class:`Result`.

    ``settings`` is a :class:`multidev.Settings`; keyword arguments are its
    fields and replace what it holds (``train(backend="jax", gpus=2)`` is
    ``train(settings=Settings(backend="jax", gpus=2))``). ``backend`` is an
    installed engine's name or an engine object. ``on_epoch`` is called with
    each epoch's :class:`EpochRecord` as it ends.

    SIGINT or SIGTERM stops the run at the next step boundary: the work so far
    goes to ``checkpoint`` (mid-epoch too: ``resume`` continues from that very
    step) and :class:`multidev.Interrupted` is raised. ``processes=N`` runs the
    job as N worker processes on this machine through the engine's launcher;
    a process started by torchrun, srun or Ray Train joins its job from the
    environment instead. Rank 0 alone writes ``checkpoint``, ``json`` and
    ``plot``.

    The settings, each also a ``multidev train`` flag:

    {settings}
    """
    if backend is not None:
        kwargs["backend"] = backend
    if settings is not None and not isinstance(settings, Settings):
        raise MultidevError(f"settings must be a multidev.Settings, got {type(settings).__name__}: give the "
                            f"settings as keyword arguments, or Settings(**them)")
    if on_epoch is not None and not callable(on_epoch):
        raise MultidevError(f"on_epoch must be a function of one EpochRecord, got {on_epoch!r}")
    s = (settings or Settings()).replace(**kwargs)
    engine = load_backend(s.backend) if isinstance(s.backend, str) else s.backend
    joined = from_environment()
    _check_paths(s)  # every rank, so that none waits at the rendezvous for one that stopped here
    if s.launch.size > 1:
        result = _launched(engine, s, joined, on_epoch)
        if s.node_rank == 0 and s.plot is not None and result.epochs:
            _write(result, s.replace(json=None))  # the workers' rank 0 wrote the JSON
        return result
    s = starting_point(s)
    if joined is None or joined.group.size == 1:
        result = run_here(engine, s, on_epoch=on_epoch)
    else:
        result = run_in_group(engine, joined, s, on_epoch)
    if joined is None or joined.group.rank == 0:
        _write(result, s)
    return result


def _signature() -> inspect.Signature:
    """``train``'s signature as help() and editors show it: the settings' fields as keyword arguments."""
    params = [inspect.Parameter("backend", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DEFAULTS["backend"]),
              inspect.Parameter("settings", inspect.Parameter.KEYWORD_ONLY, default=None),
              inspect.Parameter("on_epoch", inspect.Parameter.KEYWORD_ONLY, default=None)]
    params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
               for f, _ in fields.fields(Settings) if f.name != "backend"]
    return inspect.Signature(params, return_annotation=Result)


train.__signature__ = _signature()  # type: ignore[attr-defined]
train.__doc__ = (train.__doc__ or "").replace("{settings}", described())
