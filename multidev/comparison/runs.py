"""Cross-framework comparison: the same job on several engines and device counts.

Each run is a separate ``multidev train`` process, so that one engine's
threads, JAX's device count or a crash cannot disturb another run. Every run
gets the same model, initial weights (seed), data order and split rule.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

from multidev.comparison.divergence import Divergence
from multidev.outputs.result import Result, load_json
from multidev.settings.recipe import Recipe
from multidev.training.api import DEFAULTS


@dataclass(frozen=True)
class RunSpec:
    backend: str
    devices: int
    model: str = DEFAULTS["model"]
    dataset: str = DEFAULTS["dataset"]
    epochs: int = DEFAULTS["epochs"]
    batch_size: int = DEFAULTS["batch_size"]
    lr: float = DEFAULTS["lr"]
    seed: int = DEFAULTS["seed"]
    batchnorm: str = DEFAULTS["batchnorm"]
    data_dir: Optional[str] = None
    gpus: bool = False  # ask for GPUs (falling back to CPU devices) instead of CPU devices
    dtype: str = "float32"
    processes: int = 1  # worker processes, each with ``devices`` of its own (engines that claim multi_process)
    recipe: Recipe = field(default_factory=Recipe)

    def at_float64(self, **changes) -> "RunSpec":
        """This run as the float64 truth: float64 throughout (no bfloat16 compute)."""
        return replace(self, dtype="float64", recipe=self.recipe.at_float64(), **changes)

    @property
    def label(self) -> str:
        where = f" x{self.devices}" if self.processes == 1 else f" {self.processes}p x{self.devices}"
        return self.backend + where + (f" {self.dtype}" if self.dtype != "float32" else "")

    def argv(self, json_path: Path, trace: Optional[Path] = None) -> list[str]:
        where = "--gpus" if self.gpus else "--devices"
        args = ["train", "--backend", self.backend, where, str(self.devices), "--model", self.model,
                "--dataset", self.dataset, "--epochs", str(self.epochs), "--batch-size", str(self.batch_size),
                "--lr", repr(self.lr), "--seed", str(self.seed), "--batchnorm", self.batchnorm,
                "--dtype", self.dtype, "--json", str(json_path), "--no-progress"]
        args += ["--trace", str(trace)] if trace is not None else []
        args += ["--processes", str(self.processes)] if self.processes > 1 else []
        args += self.recipe.argv()
        return args + (["--data-dir", self.data_dir] if self.data_dir else [])


@dataclass
class Outcome:
    spec: RunSpec
    result: Optional[Result] = None
    error: Optional[str] = None
    log: list[str] = field(default_factory=list)
    #: distance from the float64 run of the same device count, per traced step, and what it means
    divergence: Optional[Divergence] = None
    verdict: Optional[str] = None

    def to_dict(self) -> dict:
        return {"settings": {**asdict(self.spec), "recipe": self.spec.recipe.settings()},
                "result": self.result.to_dict() if self.result else None,
                "error": self.error, "divergence": self.divergence.to_dict() if self.divergence else None,
                "verdict": self.verdict}


def run_one(spec: RunSpec, timeout: Optional[float] = None, trace: Optional[Path] = None) -> Outcome:
    """Train in a fresh process; a failure becomes the outcome's error, never an exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        try:
            proc = subprocess.run([sys.executable, "-m", "multidev", *spec.argv(path, trace)], capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(spec, error=f"did not finish within {timeout:.0f} s")
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not path.exists():
            errors = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            reason = errors[-1] if errors else f"exit code {proc.returncode}"
            return Outcome(spec, error=reason.removeprefix("multidev: error: "), log=lines)
        return Outcome(spec, result=load_json(path), log=lines)


def grid(backends: Sequence[str], device_counts: Sequence[int], **settings) -> list[RunSpec]:
    return [RunSpec(backend=b, devices=k, **settings) for b in backends for k in device_counts]
