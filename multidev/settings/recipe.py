"""A training recipe: optimizer, learning-rate schedule, accumulation and precision, as one value.

One object travels from the API or the command line to every worker of a
job (as flags), into the JSON result and the checkpoint, so a run can be
repeated, resumed and compared with its recipe whole.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence

from multidev.errors import MultidevError
from multidev.rules.optimizers import OPTIMIZERS, Optimizer
from multidev.rules.precision import PRECISIONS, check_accumulate, check_precision
from multidev.rules.schedules import SCHEDULES, Schedule, parse_milestones


@dataclass(frozen=True)
class Recipe:
    optimizer: Optimizer = field(default_factory=Optimizer)
    schedule: Schedule = field(default_factory=Schedule)
    #: micro-batches per update: each of ``batch_size`` rows, one update of ``accumulate * batch_size``
    accumulate: int = 1
    precision: str = "fp32"
    tf32: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "accumulate", check_accumulate(self.accumulate))
        check_precision(self.precision)

    @classmethod
    def of(cls, *, optimizer: str = "sgd", momentum: float = 0.0, nesterov: bool = False,
           weight_decay: float = 0.0, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8,
           schedule: str = "constant", milestones: Sequence[int] | str = (), factor: float = 0.1,
           warmup_steps: int = 0, warmup_epochs: float = 0.0, accumulate: int = 1, precision: str = "fp32",
           tf32: bool = False) -> "Recipe":
        """A recipe from the flat settings the API and the command line take."""
        return cls(Optimizer(optimizer, momentum, nesterov, weight_decay, tuple(betas), eps),
                   Schedule(schedule, parse_milestones(milestones), factor, warmup_steps, warmup_epochs),
                   accumulate, precision, tf32)

    def settings(self) -> dict[str, Any]:
        """For JSON results and checkpoints."""
        return {"optimizer": self.optimizer.settings(), "schedule": self.schedule.settings(),
                "accumulate": self.accumulate, "precision": self.precision, "tf32": self.tf32}

    @classmethod
    def from_settings(cls, settings: Optional[Mapping[str, Any]]) -> "Recipe":
        """The recipe a checkpoint or result names; the book's plain SGD for ones written before recipes."""
        settings = dict(settings or {})
        return cls(Optimizer.from_settings(settings.get("optimizer")), Schedule.from_settings(settings.get("schedule")),
                   int(settings.get("accumulate", 1)), settings.get("precision", "fp32"),
                   bool(settings.get("tf32", False)))

    def argv(self) -> list[str]:
        """``multidev train`` flags that give a worker this recipe (only those that differ from the default)."""
        o, s = self.optimizer, self.schedule
        args = ["--optimizer", o.name] if o.name != "sgd" else []
        args += ["--momentum", repr(o.momentum)] if o.momentum else []
        args += ["--nesterov"] if o.nesterov else []
        args += ["--weight-decay", repr(o.weight_decay)] if o.weight_decay else []
        if o.name == "adamw":
            args += ["--betas", f"{o.betas[0]!r},{o.betas[1]!r}", "--eps", repr(o.eps)]
        args += ["--schedule", s.kind] if s.kind != "constant" else []
        args += ["--milestones", ",".join(map(str, s.milestones))] if s.milestones else []
        args += ["--factor", repr(s.factor)] if s.kind == "step" else []
        args += ["--warmup-steps", str(s.warmup_steps)] if s.warmup_steps else []
        args += ["--warmup-epochs", repr(s.warmup_epochs)] if s.warmup_epochs else []
        args += ["--accumulate", str(self.accumulate)] if self.accumulate > 1 else []
        args += ["--precision", self.precision] if self.precision != "fp32" else []
        return args + (["--tf32"] if self.tf32 else [])

    def label(self) -> str:
        """A short name for tables and plots; empty for the book's plain SGD."""
        o, parts = self.optimizer, []
        if not o.plain or o.name != "sgd":
            parts.append(o.name + (f" m{o.momentum:g}" if o.momentum else "") + (" nesterov" if o.nesterov else "")
                         + (f" wd{o.weight_decay:g}" if o.weight_decay else ""))
        if self.schedule.kind != "constant" or self.schedule.warmup(1):
            parts.append(self.schedule.kind + (" +warm-up" if self.schedule.warmup(1) else ""))
        parts += [f"accumulate {self.accumulate}"] if self.accumulate > 1 else []
        parts += [self.precision] if self.precision != "fp32" else []
        return ", ".join(parts)

    def at_float64(self) -> "Recipe":
        """The same recipe for a float64 truth run: computed in float64 throughout."""
        return replace(self, precision="fp32", tf32=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The recipe's flags, shared by ``train`` and ``compare``."""
    g = parser.add_argument_group("recipe (docs/contract.md: Optimizers, Learning-rate schedules)")
    g.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS)
    g.add_argument("--momentum", type=float, default=0.0, help="sgd's momentum, in [0, 1)")
    g.add_argument("--nesterov", action="store_true", help="sgd with Nesterov's momentum")
    g.add_argument("--weight-decay", type=float, default=0.0,
                   help="sgd: added to the gradient (L2); adamw: decoupled. Every parameter is decayed")
    g.add_argument("--betas", default="0.9,0.999", help="adamw's two betas, each in [0, 1)")
    g.add_argument("--eps", type=float, default=1e-8, help="adamw's epsilon")
    g.add_argument("--schedule", default="constant", choices=SCHEDULES, help="the learning rate over the run")
    g.add_argument("--milestones", default="", help="--schedule step: epochs after which the rate drops, e.g. 5,8")
    g.add_argument("--factor", type=float, default=0.1, help="--schedule step: the rate is multiplied by this")
    g.add_argument("--warmup-steps", type=int, default=0, help="a linear warm-up over this many updates")
    g.add_argument("--warmup-epochs", type=float, default=0.0, help="a linear warm-up over this many epochs")
    g.add_argument("--accumulate", type=int, default=1,
                   help="micro-batches of --batch-size per update: the update of a batch this many times larger")
    g.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="bf16: compute in bfloat16, weights and optimizer state in float32 (engines that claim it)")
    g.add_argument("--tf32", action="store_true", help="allow TF32 matrix multiplies on GPUs (off by default)")


def from_args(args: argparse.Namespace) -> Recipe:
    try:
        b1, b2 = (float(b) for b in str(args.betas).split(","))
    except ValueError:  # not numbers, or not two of them
        raise MultidevError(f"--betas takes two numbers separated by a comma, e.g. 0.9,0.999; got {args.betas!r}")
    betas = (b1, b2)
    return Recipe.of(optimizer=args.optimizer, momentum=args.momentum, nesterov=args.nesterov,
                     weight_decay=args.weight_decay, betas=betas, eps=args.eps, schedule=args.schedule,
                     milestones=args.milestones, factor=args.factor, warmup_steps=args.warmup_steps,
                     warmup_epochs=args.warmup_epochs, accumulate=args.accumulate, precision=args.precision,
                     tf32=args.tf32)


def train_kwargs(recipe: Recipe) -> dict[str, Any]:
    """The recipe as ``multidev.train``'s keyword arguments."""
    o, s = recipe.optimizer, recipe.schedule
    return dict(optimizer=o.name, momentum=o.momentum, nesterov=o.nesterov, weight_decay=o.weight_decay,
                betas=o.betas, eps=o.eps, schedule=s.kind, milestones=s.milestones, factor=s.factor,
                warmup_steps=s.warmup_steps, warmup_epochs=s.warmup_epochs, accumulate=recipe.accumulate,
                precision=recipe.precision, tf32=recipe.tf32)
