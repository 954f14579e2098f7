"""``Settings``: everything that defines one training run, built and checked once.

``multidev.train(**kwargs)`` makes one from its keyword arguments, the
command line from its flags (:func:`from_args`), ``compare`` one per run and
a launcher hands its workers :meth:`Settings.to_argv`. The fields are
declared with :func:`multidev.settings.fields.setting`, so each knows its
default, check, flag, help and whether every rank of a job must agree on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from multidev.data import DATASETS, Dataset
from multidev.data.arrays import LAYOUTS
from multidev.data.images import COLORS, parse_size, size_text
from multidev.data.npy import save_folder
from multidev.data.transforms import normalize_text, parse_normalize
from multidev.errors import MultidevError
from multidev.nn import sources
from multidev.processes.launch import DEFAULT_MASTER, Launch
from multidev.rules.augment import parse_augment
from multidev.rules.batchnorm import BATCHNORM_MODES, check_batchnorm
from multidev.rules.devices import DeviceSpec, canonical_request
from multidev.rules.numbers import whole_number
from multidev.rules.optimizers import OPTIMIZERS, Optimizer
from multidev.rules.precision import DTYPES, PRECISIONS, check_dtype, check_precision
from multidev.rules.schedules import SCHEDULES, Schedule, parse_milestones
from multidev.rules.sharding import LEVELS, check_level
from multidev.settings import fields as _fields
from multidev.settings.fields import setting
from multidev.settings.recipe import Recipe
from multidev.training.rhythm import every

RECIPE = "recipe (docs/contract.md: Optimizers, Learning-rate schedules, Gradient accumulation, Mixed precision)"
JOB = "processes and machines (docs/contract.md: Process groups)"
OUTPUT = "outputs"
#: ``--resume auto``: from the run's own ``--checkpoint`` when that file exists
AUTO = "auto"


def _positive(what: str):
    return lambda value: whole_number(value, what)


def _learning_rate(lr: object) -> float:
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise MultidevError(f"learning rate must be a positive finite number, got {lr!r}")
    return lr  # type: ignore[return-value]


def _path(value: object) -> Optional[str]:
    return None if value is None else str(value)


def _betas(value: object) -> tuple[float, ...]:
    if isinstance(value, str):
        try:
            b1, b2 = (float(b) for b in value.split(","))
        except ValueError:  # not numbers, or not two of them
            raise MultidevError(f"--betas takes two numbers separated by a comma, e.g. 0.9,0.999; "
                                f"got {value!r}") from None
        return (b1, b2)
    return _numbers(value, "betas takes two numbers, e.g. (0.9, 0.999)")


def _numbers(value: object, takes: str) -> tuple[float, ...]:
    """A sequence of numbers given in Python, as floats; ``takes`` (what the setting takes) and the value where it
    is none."""
    try:
        return tuple(float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise MultidevError(f"{takes}; got {value!r}") from None


def _engine(value: object) -> Any:
    if isinstance(value, str) or isinstance(getattr(value, "name", None), str):
        return value
    raise MultidevError(f"backend must be an engine's name (see `multidev backends`) or an engine object, got "
                        f"{value!r}")


def _model(value: object) -> Any:
    return None if value is None else sources.check(value)


def _dataset(value: object) -> Union[str, Dataset]:
    if isinstance(value, Dataset):
        return value
    if not isinstance(value, (str, Path)):  # never the value itself in the line: it may be arrays of millions
        raise MultidevError(f"dataset got a {type(value).__name__}: wrap your arrays as multidev.data.arrays(x_train, "
                            f"y_train, x_test, y_test), or give a data set's name or path")
    if value in DATASETS:
        return str(value)
    if str(value).endswith(".npz"):
        if not Path(value).is_file():
            raise MultidevError(f"data file {value} does not exist")
        return str(value)
    if Path(value).is_dir():
        return str(value)
    if Path(value).is_file():
        raise MultidevError(f"data {value} is a file: give a .npz file, or the folder that holds it (README: Your "
                            f"data)")
    if isinstance(value, Path) or "/" in value or "\\" in value:
        raise MultidevError(f"data folder {value} does not exist")
    raise MultidevError(f"unknown data set {value!r} (nor a folder or file here): give {', '.join(DATASETS)}, a .npz "
                        f"file, a folder (README: Your data), or (in Python) multidev.data.arrays(...)")


def _weights(value: object) -> Optional[tuple[float, ...]]:
    return None if value is None else _numbers(value, "shard_weights takes one number per device, e.g. (1, 2)")


def _commas(values: tuple) -> str:
    return ",".join(repr(v) if isinstance(v, float) else str(v) for v in values)


@dataclass(frozen=True)
class Settings:
    """One training run: the engine, devices, model, data, recipe, job and outputs, checked when made.

    Every field is also a ``multidev train`` flag (its name with dashes) but
    ``shard_weights``; ``multidev.train(**kwargs)`` takes them as keyword
    arguments.
    """

    backend: Any = setting("torch", "--backend", "engine: see `multidev backends` (or an engine object, in Python)",
                           commands=("train",), check=_engine)
    devices: DeviceSpec = setting(None, "--devices", "k virtual devices, or names: cpu:0,cpu:1",
                                  commands=("train",), exclusive="where",
                                  text=lambda v: str(v) if isinstance(v, int) else ",".join(v))
    gpus: Optional[int] = setting(None, "--gpus", "k GPUs; falls back to k CPU devices with a warning", type=int,
                                  commands=("train",), exclusive="where")
    model: Any = setting(None, "--model", "the network: resnet18 (the default), "
                         "lenet, mlp, convnet, path/net.py:function, net.onnx or net.json (in Python also a "
                         "multidev.nn definition)", check=_model, text=sources.text)
    dataset: Union[str, Dataset] = setting("digits", "--dataset", "the data set: digits, fashion-mnist, cifar-10, "
                                           "synthetic, a .npz file or a folder of .npy files (x_train, y_train, "
                                           "x_test, y_test), a folder of class folders of images, a Hugging Face "
                                           "set saved to disk; in Python also multidev.data.arrays(...)",
                                           check=_dataset)
    layout: str = setting("NCHW", "--layout", "how a .npz file's or .npy folder's images lie: NCHW or NHWC",
                          choices=LAYOUTS)
    image_size: Optional[tuple[int, int]] = setting(None, "--image-size", "an image folder's images resized to "
                                                    "this: 28, or HEIGHTxWIDTH such as 32x48", check=parse_size,
                                                    text=size_text)
    color: str = setting("auto", "--color", "an image folder read as gray (1 channel) or rgb (3); auto: gray "
                         "when every image is", choices=COLORS)
    image_column: str = setting("image", "--image-column", "a Hugging Face data set's column of samples")
    label_column: str = setting("label", "--label-column", "a Hugging Face data set's column of labels")
    augment: tuple[str, ...] = setting((), "--augment", "crop,flip: random crops of zero-padded images and "
                                       "left-right flips, drawn from (seed, epoch, sample)", check=parse_augment,
                                       text=",".join)
    normalize: Any = setting(None, "--normalize", "auto: subtract the training set's per-channel mean, divide by "
                             "its standard deviation; or MEANS/STDS such as 0.5/0.25", check=parse_normalize,
                             text=normalize_text)
    data_dir: Optional[str] = setting(None, "--data-dir",
                                      "where Fashion-MNIST and CIFAR-10 are kept (default: ~/.cache/multidev/<name>)",
                                      check=_path, agree=False)
    epochs: int = setting(10, "--epochs", "passes over the training set", type=int, check=_positive("epochs"))
    batch_size: int = setting(128, "--batch-size", "rows per minibatch, over every device of every process",
                              type=int, check=_positive("batch size"))
    lr: float = setting(0.1, "--lr", "learning rate (the schedule's base rate)", type=float, check=_learning_rate,
                        text=repr)
    seed: int = setting(0, "--seed", "initial weights and data order", type=int,
                        check=lambda v: whole_number(v, "seed", 0))
    batchnorm: str = setting("local", "--batchnorm", "local: per-device statistics, as in the book; sync: the "
                             "whole minibatch's", choices=BATCHNORM_MODES, check=check_batchnorm)
    dtype: str = setting("float32", "--dtype", "float64 (engines that claim it): the truth that float32 runs are "
                         "measured against", choices=DTYPES, check=check_dtype, commands=("train",))
    shard: str = setting("none", "--shard", "what each device keeps only its rows of: optimizer (state), gradients "
                         "(and reduced gradients), parameters (and parameters, gathered for each step); ZeRO's stages "
                         "1-3. The answers do not change", choices=LEVELS, check=check_level)
    # the recipe: checked together when the Recipe is made
    optimizer: str = setting("sgd", "--optimizer", "sgd or adamw", choices=OPTIMIZERS, group=RECIPE)
    momentum: float = setting(0.0, "--momentum", "sgd's momentum, in [0, 1)", type=float, text=repr, group=RECIPE)
    nesterov: bool = setting(False, "--nesterov", "sgd with Nesterov's momentum", group=RECIPE)
    weight_decay: float = setting(0.0, "--weight-decay", "sgd: added to the gradient (L2); adamw: decoupled. Every "
                                  "parameter is decayed", type=float, text=repr, group=RECIPE)
    betas: tuple[float, ...] = setting((0.9, 0.999), "--betas", "adamw's two betas, each in [0, 1)",
                                       check=_betas, text=_commas, group=RECIPE)
    eps: float = setting(1e-8, "--eps", "adamw's epsilon", type=float, text=repr, group=RECIPE)
    schedule: str = setting("constant", "--schedule", "the learning rate over the run", choices=SCHEDULES,
                            group=RECIPE)
    milestones: tuple[int, ...] = setting((), "--milestones", "--schedule step: epochs after which the rate drops, "
                                          "e.g. 5,8", check=parse_milestones, text=_commas, group=RECIPE)
    factor: float = setting(0.1, "--factor", "--schedule step: the rate is multiplied by this", type=float,
                            text=repr, group=RECIPE)
    warmup_steps: int = setting(0, "--warmup-steps", "a linear warm-up over this many updates", type=int,
                                group=RECIPE)
    warmup_epochs: float = setting(0.0, "--warmup-epochs", "a linear warm-up over this many epochs", type=float,
                                   text=repr, group=RECIPE)
    accumulate: int = setting(1, "--accumulate", "micro-batches of --batch-size per update: the update of a batch "
                              "this many times larger", type=int, group=RECIPE)
    precision: str = setting("fp32", "--precision", "bf16: compute in bfloat16, weights and optimizer state in "
                             "float32 (engines that claim it)", choices=PRECISIONS, group=RECIPE)
    tf32: bool = setting(False, "--tf32", "allow TF32 matrix multiplies on GPUs (off by default)", group=RECIPE)
    # the job
    processes: int = setting(1, "--processes", "worker processes on this machine, each with --devices or --gpus of "
                             "its own", type=int, agree=False, group=JOB)
    nnodes: int = setting(1, "--nnodes", "machines in the job (run the same command on each)", type=int,
                          agree=False, commands=("train",), group=JOB)
    node_rank: int = setting(0, "--node-rank", "this machine's number, 0 to nnodes - 1", type=int, agree=False,
                             commands=("train",), group=JOB)
    master: str = setting(DEFAULT_MASTER, "--master", "HOST:PORT where the workers meet (machine 0)", agree=False,
                          commands=("train",), group=JOB)
    max_restarts: int = setting(0, "--max-restarts", "when a worker dies, stop the others and start the job again "
                                "from its last checkpoint, up to this many times", type=int,
                                check=lambda v: whole_number(v, "--max-restarts", 0), agree=False,
                                commands=("train",), group=JOB)
    # outputs: rank 0 alone writes them
    checkpoint: Optional[str] = setting(None, "--checkpoint", "save the model here after every epoch (atomically)",
                                        check=_path, agree=False, commands=("train",), group=OUTPUT)
    checkpoint_every: Optional[int | str] = setting(
        None, "--checkpoint-every", "also save mid-epoch, every this many updates (e.g. 50) or this long (e.g. "
        "10m, 90s, 1h), so a stopped job loses at most that much", check=every, agree=False, commands=("train",),
        group=OUTPUT)
    resume: Optional[str] = setting(None, "--resume", "continue from this checkpoint, its model and all (no --model "
                                    "needed); auto: from --checkpoint's file when it exists, so the same command run "
                                    "again goes on where it stopped",
                                    check=_path, agree="presence", commands=("train",), group=OUTPUT)
    trace: Optional[str] = setting(None, "--trace", "folder to keep the parameters of the first steps and every "
                                   "epoch in", check=_path, agree=False, commands=("train",), group=OUTPUT)
    json: Optional[str] = setting(None, "--json", "write the result as JSON here", check=_path, agree=False,
                                  commands=("train",), group=OUTPUT)
    plot: Optional[str] = setting(None, "--plot", "write a PNG of accuracy per epoch here", check=_path,
                                  agree=False, commands=("train",), group=OUTPUT)
    progress: bool = setting(False, "--no-progress", "progress bars (on by default on the command line; "
                             "--no-progress: none)", agree=False, cli_default=True, group=OUTPUT)
    prefetch: bool = setting(True, "--no-prefetch", "placing the next minibatch during the step before (the default; "
                             "--no-prefetch: placing each when its own step starts)", agree=False)
    late_sums: bool = setting(True, "--no-late-sums", "reading each update's loss back once the next update is "
                              "queued, where the engine claims pending_stats (the default; --no-late-sums: as each "
                              "update ends, the device idle meanwhile)", agree=False)
    shard_weights: Optional[tuple[float, ...]] = setting(
        None, None, "rows per device in proportion to these (one process; checked against the devices)",
        check=_weights)

    def __post_init__(self) -> None:
        for f, meta in _fields.fields(type(self)):
            checked = None if meta.check is None else meta.check(getattr(self, f.name))
            if checked is not None:  # a check may return the value in canonical form
                object.__setattr__(self, f.name, checked)
        gpus, devices = canonical_request(self.gpus, self.devices)
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "devices", devices)
        recipe = Recipe(Optimizer(self.optimizer, self.momentum, self.nesterov, self.weight_decay, self.betas,
                                  self.eps),
                        Schedule(self.schedule, self.milestones, self.factor, self.warmup_steps, self.warmup_epochs),
                        self.accumulate, self.precision, self.tf32)
        check_precision(self.precision, self.dtype)
        if self.checkpoint_every is not None and self.checkpoint is None and not self.max_restarts:
            raise MultidevError("--checkpoint-every needs --checkpoint PATH (or --max-restarts): the file to save to")
        _check_sharded_job(self)
        if self.resume == AUTO and self.checkpoint is None:
            raise MultidevError("--resume auto needs --checkpoint PATH: the file it resumes from when it exists")
        object.__setattr__(self, "_recipe", recipe)
        launch = Launch(self.processes, self.nnodes, self.node_rank, self.master, max_restarts=self.max_restarts,
                        checkpoint=self.checkpoint)
        object.__setattr__(self, "_launch", launch)

    @property
    def recipe(self) -> Recipe:
        """The optimizer, schedule, accumulation and precision, as engines and checkpoints see them."""
        return self._recipe  # type: ignore[attr-defined]

    @property
    def launch(self) -> Launch:
        """What the job asks for: processes here, machines, this one's rank, where they meet."""
        return self._launch  # type: ignore[attr-defined]

    @property
    def engine_name(self) -> str:
        return self.backend if isinstance(self.backend, str) else self.backend.name

    @property
    def device_count(self) -> int:
        """Devices per process."""
        if self.gpus is not None:
            return self.gpus
        return 1 if self.devices is None else self.devices if isinstance(self.devices, int) else len(self.devices)

    @property
    def label(self) -> str:
        """A name for tables and plots that tells every run of a comparison apart: engine, devices, processes,
        dtype and precision ("torch x2", "jax 2p x1 float64", "mxnet x1 bf16")."""
        where = f" x{self.device_count}" if self.processes == 1 else f" {self.processes}p x{self.device_count}"
        gpu = " GPU" if self.gpus is not None else ""
        number = "" if self.dtype == "float32" else f" {self.dtype}"
        shard = "" if self.shard == "none" else f" shard={self.shard}"
        return (self.engine_name + where + gpu + number + ("" if self.precision == "fp32" else f" {self.precision}")
                + shard)

    def replace(self, **changes: Any) -> "Settings":
        """These settings with ``changes``, checked again."""
        if "gpus" in changes and changes["gpus"] is not None:
            changes.setdefault("devices", None)
        if "devices" in changes and changes["devices"] is not None:
            changes.setdefault("gpus", None)
        return dataclasses.replace(self, **changes)

    def at_float64(self, **changes: Any) -> "Settings":
        """This run as the float64 truth: float64 throughout (no bfloat16 compute, no TF32)."""
        return self.replace(dtype="float64", precision="fp32", tf32=False, **changes)

    def to_argv(self, command: str = "train") -> list[str]:
        """``multidev <command>`` arguments that give a process these settings (the ones off the default)."""
        if isinstance(self.dataset, Dataset):
            raise MultidevError("a Dataset object cannot reach other processes as an argument: use "
                                "shareable(folder) first, or give a data set's name or path")
        if self.shard_weights is not None:
            raise MultidevError("shard weights are for one process: leave them out with processes > 1")
        return [command, *_fields.argv(self, type(self), command)]

    def shareable(self, folder: Path) -> "Settings":
        """These settings as other processes can start them: a data set made in Python saved under ``folder``
        as ``.npy`` files they map (once per data set), its path in its place."""
        if not isinstance(self.dataset, Dataset):
            return self
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.dataset.name) or "data"
        target = Path(folder) / f"data-{id(self.dataset)}" / name
        if not target.exists():
            save_folder(self.dataset, target)
        return self.replace(dataset=str(target), layout="NCHW", image_size=None, color="auto")  # read as arrays

    def agreement(self) -> dict[str, Any]:
        """What every rank of a job must have been started with alike (paths and outputs may differ)."""
        out: dict[str, Any] = {"backend": self.engine_name}
        for f, meta in _fields.fields(type(self)):
            if f.name != "backend" and meta.agree:
                value = getattr(self, f.name)
                out[f.name] = (value is not None) if meta.agree == "presence" else value
        return out

    def to_dict(self) -> dict[str, Any]:
        """For JSON: every field, the engine by name, a data set object by its name."""
        out = {f.name: getattr(self, f.name) for f, _ in _fields.fields(type(self))}
        out["backend"] = self.engine_name
        out["dataset"] = self.dataset.name if isinstance(self.dataset, Dataset) else self.dataset
        out["model"] = None if self.model is None else sources.text(self.model)  # a definition object as JSON text
        return out


def _check_sharded_job(s: Settings) -> None:
    """A job whose state is sharded over its processes gathers it on every rank at once: every rank must know
    when, so a checkpoint's rhythm is a count of updates, and the trace (rank 0's alone) is refused."""
    if s.shard == "none" or s.processes * s.nnodes == 1:
        return
    if isinstance(s.checkpoint_every, str):
        raise MultidevError(f"--checkpoint-every {s.checkpoint_every} with --shard {s.shard} over processes: every "
                            f"process gathers the checkpoint at once, so give a count of updates (e.g. 50)")
    if s.trace is not None:
        raise MultidevError(f"--trace with --shard {s.shard} over processes: trace a run of one process, or "
                            f"use --shard none")


DEFAULTS = {f.name: f.default for f, _ in _fields.fields(Settings)}


def described() -> str:
    """Every setting with its default and meaning, one line each: for ``train``'s and ``Settings``' docstrings."""
    return "\n    ".join(f"- ``{f.name}`` ({f.default!r}): {meta.help}" for f, meta in _fields.fields(Settings))


Settings.__doc__ = (Settings.__doc__ or "") + "\n    The settings:\n\n    " + described() + "\n"


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The run's flags that belong to ``command`` (``train`` takes every one, ``compare`` the ones of a grid)."""
    _fields.add_arguments(parser, Settings, command)


def from_args(args: argparse.Namespace, **fixed: Any) -> Settings:
    """The settings a parsed command line gives (flags the command does not take keep their default)."""
    given = {f.name: getattr(args, f.name) for f, meta in _fields.fields(Settings) if hasattr(args, f.name)}
    return Settings(**{**given, **fixed})

