"""A run in this process: build the replicas, resume, train epoch by epoch, save."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from multidev.data import Dataset, load_dataset
from multidev.data.transforms import Transforms
from multidev.engines.capabilities import check_claims
from multidev.engines.cpu_flags import native_bf16
from multidev.engines.protocol import Backend, Replicas, Setup, plan_cpu_devices, replicate
from multidev.engines.registry import engine_version
from multidev.errors import MultidevError, PeerLost, UserCodeError
from multidev.nn import sources
from multidev.outputs import checkpoint as ckpt
from multidev.outputs.result import EpochRecord, Result
from multidev.outputs.trace import Trace
from multidev.processes.faults import CHECKPOINT_AT_LAUNCH
from multidev.processes.group import Joined
from multidev.processes.job import Job
from multidev.rules.devices import Device, cpu_devices_wanted, resolve_devices
from multidev.rules.models import ModelSpec, State
from multidev.rules.optimizers import check_state
from multidev.rules.sharding import per_device
from multidev.rules.split import shard_sizes
from multidev.settings.recipe import Recipe
from multidev.settings.run import Settings
from multidev.training.evaluate import evaluate
from multidev.training.interrupt import Interrupted, StopFlag, stop_at_step_boundary
from multidev.training.resume import check_same_run, run_settings
from multidev.training.loop import Epoch, Position, Stopped, steps_per_epoch, train_epoch
from multidev.training.rhythm import Rhythm

OnEpoch = Optional[Callable[[EpochRecord], None]]


@dataclass
class Start:
    """Where a run begins: fresh from the seed, or where a checkpoint left off."""

    state: State
    seed: int
    first: int = 1                       # the first epoch to train
    history: list[EpochRecord] = field(default_factory=list)
    position: Optional[Position] = None  # mid-epoch: where in ``first`` to go on
    optimizer_state: Optional[State] = None


def resume_from(s: Settings, spec: ModelSpec, data_name: str, say: bool = True) -> Start:
    """The checkpoint ``s.resume`` as a start, checked against this run's model, optimizer and settings (``say``:
    this process says where they differ)."""
    saved_spec, state, meta = ckpt.load(s.resume)
    if saved_spec != spec:
        raise _other_model(s, saved_spec, spec.name)
    saved = Recipe.from_settings(meta.get("recipe"))
    if saved.optimizer != s.recipe.optimizer:
        raise MultidevError(f"checkpoint {s.resume} was trained with {saved.label() or 'plain sgd'}, this run "
                            f"asks for {s.recipe.label() or 'plain sgd'}: resume with the same optimizer settings")
    check_same_run(s, data_name, meta, s.resume, say)
    start = Start(state, int(meta["seed"]), int(meta["epoch"]) + 1,
                  [EpochRecord(**e) for e in meta.get("history", [])],
                  optimizer_state=ckpt.load_optimizer_state(s.resume) if not s.recipe.optimizer.plain else None)
    if meta.get("position"):
        start.position = Position(**meta["position"])
        start.first = start.position.epoch
    return start


@dataclass
class Training:
    """A run's replicas with everything its epochs share: the settings, data, job, result and checkpoints."""

    engine: Backend
    settings: Settings
    job: Job
    data: Dataset
    spec: ModelSpec
    replicas: Replicas
    result: Result
    seed: int
    trace: Optional[Trace] = None
    rhythm: Rhythm = field(default_factory=lambda: Rhythm(None))
    transforms: Transforms = field(default_factory=Transforms)

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.data, self.settings)

    def rate(self, epoch: int) -> Callable[[int], float]:
        s, steps = self.settings, self.steps_per_epoch
        return lambda step: s.recipe.schedule.rate(s.lr, (epoch - 1) * steps + step, steps, s.epochs)

    def save(self, epoch: int, position: Optional[Position] = None) -> None:
        """A checkpoint after ``epoch`` (and ``position`` steps into the next), when the run keeps them."""
        s = self.settings
        if s.checkpoint is None:
            return
        stateful = not s.recipe.optimizer.plain  # engines that claim optimizers hold state to keep
        extra = self.replicas.optimizer_state() if stateful else {}  # type: ignore[attr-defined]
        state = self.replicas.state()  # a job sharded over its processes gathers it on every rank at once
        if not self.job.writer:
            return
        ckpt.save(s.checkpoint, self.spec, state, epoch=epoch, seed=self.seed,
                  backend=self.engine.name, history=[vars(e) for e in self.result.epochs],
                  position=vars(position) if position else None, recipe=s.recipe.settings(), optimizer_state=extra,
                  settings=run_settings(s, self.data.name), **self.inputs())

    def inputs(self) -> dict[str, Any]:
        """What a checkpoint says of the model's input, for whoever serves it: the classes' names and the
        normalisation the run applied (``multidev export`` writes it into the ONNX file)."""
        t = self.transforms
        normalize = None if t.mean is None else {"mean": t.mean.tolist(), "std": t.std.tolist()}  # type: ignore
        return {"classes": list(self.data.classes) if self.data.classes else None, "normalization": normalize}

    def on_step(self, epoch: int) -> Callable[[int, Callable[[], Position], bool], None]:
        """After each update: the trace's steps, and a mid-epoch checkpoint when ``checkpoint_every`` says so."""
        steps = self.steps_per_epoch

        def after(step: int, position: Callable[[], Position], last: bool) -> None:
            update = (epoch - 1) * steps + step
            if self.trace is not None and self.trace.wants(update, last):
                position()  # the update's sums read: a diverged one stops here, untraced
                self.trace(update, last, self.replicas)
            if not last and self.rhythm.due(update):
                self.save(epoch - 1, position())

        return after

    def epoch(self, number: int, position: Optional[Position], stop: StopFlag) -> EpochRecord:
        """Train and evaluate epoch ``number``; a signal saves where it stopped and raises Interrupted."""
        s, rate = self.settings, self.rate(number)
        try:
            loss, train_acc, seconds = train_epoch(
                self.replicas, Epoch(number, self.data, s, self.seed, rate, self.job, self.transforms),
                start=position if position and position.epoch == number else None, stop=stop,
                on_step=self.on_step(number), pending="pending_stats" in self.engine.capabilities)
        except Stopped as stopped:
            self.save(number - 1, stopped.position)
            raise Interrupted(number, stopped.position.step, s.checkpoint, stop.signum) from None
        _, test_acc, _ = evaluate(self.replicas, self.transforms.test(self.data.x_test), self.data.y_test,
                                  s.batch_size, s.shard_weights, self.job)
        return EpochRecord(number, loss, train_acc, test_acc, seconds, len(self.data.x_train) / max(seconds, 1e-9),
                           [rate(step) for step in range(1, self.steps_per_epoch + 1)])

    def run(self, start: Start, on_epoch: OnEpoch) -> Result:
        s = self.settings
        with stop_at_step_boundary() as stop:
            for number in range(start.first, s.epochs + 1):
                record = self.epoch(number, start.position, stop)
                self.result.epochs.append(record)
                self.save(number)
                if on_epoch is not None:
                    on_epoch(record)
                if self.job.all_sum(np.array([float(bool(stop))]))[0] and number < s.epochs:
                    raise Interrupted(number + 1, 0, s.checkpoint, stop.signum)
        self.result.compile_seconds = self.replicas.compile_seconds
        self.result.compile_cached = int(getattr(self.replicas, "compile_cached", 0))
        self.result.process_sums = str(getattr(self.replicas, "process_sums", ""))
        return self.result


def _result(engine: Backend, s: Settings, spec: ModelSpec, data: Dataset, devices: list[Device], job: Job,
            start: Start) -> Result:
    names = [str(d) for d in devices] if job.group.size == 1 else [
        f"rank{r}/{d}" for r in range(job.group.size) for d in devices]
    return Result(backend=engine.name, devices=names, model=spec.name, dataset=data.name, batch_size=s.batch_size,
                  lr=float(s.lr), seed=start.seed, batchnorm=s.batchnorm, test_total=len(data.x_test),
                  epochs=start.history, version=engine_version(engine), recipe=s.recipe.settings(), shard=s.shard,
                  memory=memory(spec, s, len(devices) * job.group.size))


def memory(spec: ModelSpec, s: Settings, devices: int) -> dict[str, list[int]]:
    """Bytes each device keeps of the parameters, reduced gradient and optimizer state (contract: Sharding)."""
    shapes = {p.name: tuple(p.shape) for p in spec.params() if p.trainable}
    return per_device(shapes, len(s.recipe.optimizer.slots), np.dtype(s.dtype).itemsize, devices, s.shard)


def dataset_of(s: Settings, devices: int, progress: bool = False) -> Dataset:
    """The run's data, checked to give every one of the job's ``devices`` a row of the first minibatch."""
    data = s.dataset if isinstance(s.dataset, Dataset) else load_dataset(
        s.dataset, s.data_dir, s.layout, image_size=s.image_size, color=s.color, image_column=s.image_column,
        label_column=s.label_column, progress=progress)
    if len(data.x_train) < devices:
        raise MultidevError(f"{data.name} has {len(data.x_train)} training samples for {devices} devices: give "
                            f"more data or use fewer devices")
    if data.num_classes < 2:
        raise MultidevError(f"{data.name} has one class: a classifier learns to tell two or more apart; give samples "
                            f"of another class")
    return data


def check_inputs(s: Settings, devices: int) -> None:
    """The run's data and model, read and built once before other processes start: a mistake in them is one
    line here, not one (or a traceback) from each process. A resumed run's model is the checkpoint's, checked
    by the workers (another machine's checkpoint may not be here)."""
    data = dataset_of(s, devices)
    if s.model is not None or s.resume is None:
        model_spec(s, data)


def model_spec(s: Settings, data: Dataset) -> ModelSpec:
    """The run's model for ``data``: the one named, or when resuming without ``--model`` the checkpoint's."""
    if s.model is None and s.resume is not None:
        saved = ckpt.spec_of(s.resume)
        if not _fits(saved, data):
            trained_on = (ckpt.meta_of(s.resume).get("settings") or {}).get("dataset")
            raise MultidevError(f"checkpoint {s.resume} was trained on {trained_on or 'data'} of shape "
                                f"{saved.in_shape} with {saved.num_classes} classes; {data.name} has {data.shape} "
                                f"with {data.num_classes}: resume on the data it was trained on (--dataset)")
        return ModelSpec(saved.name, data.shape, data.num_classes, saved.graph)
    try:
        return ModelSpec(sources.label(s.model), data.shape, data.num_classes, sources.definition(s.model))
    except UserCodeError:
        raise
    except MultidevError:  # the model does not fit this data: where it resumes another model's checkpoint, say so
        saved = ckpt.spec_of(s.resume) if s.resume is not None and os.path.isfile(s.resume) else None  # not "auto"
        if saved is None or _fits(saved, data):
            raise
        raise _other_model(s, saved, sources.label(s.model)) from None


def _fits(saved: ModelSpec, data: Dataset) -> bool:
    """Whether a checkpoint's model was made for samples of ``data``'s shape and classes."""
    return (saved.in_shape, saved.num_classes) == (tuple(data.shape), data.num_classes)


def _other_model(s: Settings, saved: ModelSpec, name: str) -> MultidevError:
    return MultidevError(f"checkpoint {s.resume} holds {saved.name} for {saved.in_shape}, this run trains {name} on "
                         f"{s.dataset!s}: resume with the same settings (leave --model out: the checkpoint's comes "
                         f"with it)")


class EmulatedBfloat16Warning(UserWarning):
    """A bf16 run on CPU devices of a CPU without bfloat16 arithmetic: it trains, slower than float32."""


def warn_other_normalization(graph, normalize: object) -> None:
    """One line where an exported file normalised its input and this run's ``--normalize`` is not the same."""
    if graph.normalization is None:
        return
    if isinstance(normalize, tuple) and all(len(a) == len(b) and np.allclose(a, b, rtol=1e-5)
                                            for a, b in zip(normalize, graph.normalization)):
        return
    from multidev.nn.onnx import normalization_line
    warnings.warn(normalization_line(graph), stacklevel=2)


def warn_emulated_bf16(precision: str, devices: list[Device]) -> None:
    """One line where ``--precision bf16`` would run slower than float32: the CPU has no bfloat16 arithmetic."""
    if precision == "bf16" and any(d.kind == "cpu" for d in devices) and not native_bf16():
        warnings.warn("this CPU has no bfloat16 arithmetic (AVX-512 BF16 or AMX), so the frameworks emulate it and "
                      "--precision bf16 trains slower than fp32 here (torch's convolutions: 14 times, on an AVX2 "
                      "EPYC); use --precision fp32, or a GPU", EmulatedBfloat16Warning, stacklevel=2)


def plan_devices(engine: Backend, s: Settings) -> None:
    """Tell an engine that fixes its CPU device count at start-up the run's, before it starts (a no-op after)."""
    plan_cpu_devices(engine, cpu_devices_wanted(s.gpus, s.devices))


def run_here(engine: Backend, s: Settings, job: Job = Job(), on_epoch: OnEpoch = None, local_rank: int = 0) -> Result:
    """Train ``s`` in this process (this rank's share of ``job``), reporting each epoch to ``on_epoch``."""
    plan_devices(engine, s)
    # too few: the engine says where its count came from (an earlier run of this process?) and what sets another
    chosen = resolve_devices(gpus=s.gpus, devices=s.devices, gpu_count=engine.gpu_count(),
                             max_cpu=engine.max_cpu_devices(), first_gpu=local_rank,
                             cpu_note=lambda: engine.settings().get("cpu devices", ""))
    if job.writer:
        warn_emulated_bf16(s.precision, chosen)
    if s.shard_weights is not None:
        shard_sizes(0, len(chosen) * job.group.size, s.shard_weights)  # validates the weights up front
    data = dataset_of(s, len(chosen) * job.group.size, progress=s.progress and job.writer)
    spec = model_spec(s, data)
    if job.writer:
        warn_other_normalization(spec.graph, s.normalize)
    start = resume_from(s, spec, data.name, job.writer) if s.resume is not None else Start(spec.init(s.seed), s.seed)
    setup = Setup(spec, tuple(chosen), s.batchnorm, s.dtype, job.group, optimizer=s.recipe.optimizer,
                  accumulate=s.accumulate, precision=s.precision, tf32=s.tf32, rows=s.batch_size,
                  shard=s.shard)
    s.recipe.schedule.check(steps_per_epoch(data, s), s.epochs)
    replicas = replicate(engine, setup, start.state)
    if start.optimizer_state is not None:
        check_state(s.recipe.optimizer, spec, start.optimizer_state)
        replicas.load_optimizer_state(start.optimizer_state)  # type: ignore[attr-defined]
    fresh = start.state if start.first == 1 and start.position is None else None  # step 0
    trace = Trace(s.trace, spec, fresh) if s.trace is not None else None
    transforms = Transforms.of(s.augment, s.normalize, data.x_train)  # "auto" reads the training set once
    training = Training(engine, s, job, data, spec, replicas, _result(engine, s, spec, data, chosen, job, start),
                        start.seed, trace, Rhythm(s.checkpoint_every), transforms)
    return training.run(start, on_epoch)


#: set by ``python -m multidev`` in a job's worker, which ends its process itself right after an error
_ENDS_AT_ONCE: list[bool] = []


def run_in_group(engine: Backend, joined: Joined, s: Settings, on_epoch: OnEpoch) -> Result:
    """This worker's share of a job: join the framework's runtime, check that every rank agrees, train."""
    check_claims(engine, frozenset({"multi_process"}))
    plan_devices(engine, s)  # joining starts the framework
    engine.join(joined.group, joined.local_rank)  # type: ignore[attr-defined]
    try:
        job = Job(joined.group, engine.all_sum)  # type: ignore[attr-defined]
        job.check_agreement(s.agreement())
        if not job.writer:  # one writer, one progress bar, one set of epoch lines
            # a job sharded over its processes gathers a checkpoint's state on every rank: they save together
            kept = {} if s.shard != "none" else {"checkpoint": None, "checkpoint_every": None}
            s = s.replace(**kept, trace=None, json=None, plot=None, progress=False)
            on_epoch = None
        result = run_here(engine, s, job, on_epoch, joined.local_rank)
    except BaseException as exc:
        # An error of this rank alone (or a lost peer) leaves no way out: the peers wait inside a collective for it,
        # and leaving waits for them (JAX's shutdown barrier: 5 minutes, then SIGABRT, the error unsaid). A job's
        # worker ends at once instead (multidev/__main__.py) and its launcher stops the others. Signals and
        # multidev's errors come to every rank at the same step (a diverged loss): they leave together.
        if isinstance(exc, Interrupted):  # one line for the job: from multidev's launcher, else from rank 0
            exc.quiet = joined.group.rank != 0 or os.environ.get(CHECKPOINT_AT_LAUNCH) is not None
        alone = isinstance(exc, (PeerLost, UserCodeError)) or not isinstance(exc, (KeyboardInterrupt, MultidevError))
        if not (alone and _ENDS_AT_ONCE):
            engine.leave()  # type: ignore[attr-defined]
        raise
    engine.leave()  # type: ignore[attr-defined]
    return result


def ends_at_once() -> None:
    """This process ends with ``os._exit`` after an error in a job: leaving the runtime first could wait for ever."""
    _ENDS_AT_ONCE.append(True)
