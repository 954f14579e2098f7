"""Cross-framework comparison: the same job on several engines and device counts.

Each run is a separate ``multidev train`` process, so that one engine's
threads, JAX's device count or a crash cannot disturb another run. Every run
gets the same model, initial weights (seed), data order and split rule.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from multidev.comparison.divergence import Divergence
from multidev.outputs.result import Result, load_json
from multidev.settings.run import Settings


@dataclass
class Outcome:
    spec: Settings
    result: Optional[Result] = None
    error: Optional[str] = None
    log: list[str] = field(default_factory=list)
    #: distance from the float64 run of the same device count, per traced step, and what it means
    divergence: Optional[Divergence] = None
    verdict: Optional[str] = None

    def to_dict(self) -> dict:
        return {"settings": {**self.spec.to_dict(), "recipe": self.spec.recipe.settings()},
                "result": self.result.to_dict() if self.result else None,
                "error": self.error, "divergence": self.divergence.to_dict() if self.divergence else None,
                "verdict": self.verdict}


def run_one(spec: Settings, timeout: Optional[float] = None, trace: Optional[Path] = None) -> Outcome:
    """Train in a fresh process; a failure becomes the outcome's error, never an exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        try:
            argv = spec.replace(json=str(path), trace=trace, progress=False).to_argv()
            proc = subprocess.run([sys.executable, "-m", "multidev", *argv], capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(spec, error=f"did not finish within {timeout:.0f} s")
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not path.exists():
            errors = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            reason = errors[-1] if errors else f"exit code {proc.returncode}"
            return Outcome(spec, error=reason.removeprefix("multidev: error: "), log=lines)
        return Outcome(spec, result=load_json(path), log=lines)


def grid(backends: Sequence[str], device_counts: Sequence[int], base: Settings = Settings()) -> list[Settings]:
    """``base`` on every engine and device count, engines first."""
    return [base.replace(backend=b, devices=k) for b in backends for k in device_counts]
