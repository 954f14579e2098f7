"""What a training run returns and writes with --json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from multidev.outputs.files import atomic_write


@dataclass
class EpochRecord:
    epoch: int
    loss: float
    train_acc: float
    test_acc: float
    seconds: float
    samples_per_sec: float
    #: the learning rate of each update of the epoch, in order (the schedule's)
    rates: list[float] = field(default_factory=list)


@dataclass
class Result:
    backend: str
    devices: list[str]
    model: str
    dataset: str
    batch_size: int
    lr: float
    seed: int
    batchnorm: str
    test_total: int
    compile_seconds: float = 0.0
    #: compiled programs an engine loaded from a persistent cache instead of compiling (JAX)
    compile_cached: int = 0
    #: how the gradients crossed the processes of a job (the engine's word: "shared memory", "gloo", ...)
    process_sums: str = ""
    epochs: list[EpochRecord] = field(default_factory=list)
    version: str = ""
    #: optimizer, schedule, accumulation and precision (``multidev.settings.recipe.Recipe.settings``)
    recipe: dict[str, Any] = field(default_factory=dict)
    #: the job's restarts after a fault (``--max-restarts``): attempt, failed, how, epoch, step
    restarts: list[dict[str, Any]] = field(default_factory=list)
    #: what each device keeps only its rows of (contract: Sharding)
    shard: str = "none"
    #: bytes each of the job's devices keeps of "parameters", "gradients" (reduced) and "optimizer" state
    memory: dict[str, list[int]] = field(default_factory=dict)

    @property
    def test_acc(self) -> Optional[float]:
        return self.epochs[-1].test_acc if self.epochs else None

    @property
    def sec_per_epoch(self) -> Optional[float]:
        return sum(e.seconds for e in self.epochs) / len(self.epochs) if self.epochs else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["test_acc"] = self.test_acc
        out["sec_per_epoch"] = self.sec_per_epoch
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Result":
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["epochs"] = [EpochRecord(**e) for e in data.get("epochs", [])]
        return cls(**fields)

    def summary(self) -> str:
        """The book's closing line."""
        restarted = f", after {len(self.restarts)} restart(s)" if self.restarts else ""
        return (f"test acc: {self.test_acc:.2f}, {self.sec_per_epoch:.1f} sec/epoch "
                f"on [{', '.join(self.devices)}]{restarted}")


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_write(path, "w") as f:
        f.write(text)


def save_json(result: Result, path: str | Path) -> None:
    write_text_atomic(path, json.dumps(result.to_dict(), indent=2) + "\n")


def load_json(path: str | Path) -> Result:
    return Result.from_dict(json.loads(Path(path).read_text()))
