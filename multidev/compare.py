"""Cross-framework comparison: the same job on several engines and device counts.

Each run is a separate ``multidev train`` process, so that one engine's
threads, JAX's device count or a crash cannot disturb another run. Every run
gets the same model, initial weights (seed), data order and split rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from .errors import MultidevError
from .result import Result, write_text_atomic
from .train import DEFAULTS


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

    def argv(self, json_path: Path) -> list[str]:
        where = "--gpus" if self.gpus else "--devices"
        args = ["train", "--backend", self.backend, where, str(self.devices), "--model", self.model,
                "--dataset", self.dataset, "--epochs", str(self.epochs), "--batch-size", str(self.batch_size),
                "--lr", repr(self.lr), "--seed", str(self.seed), "--batchnorm", self.batchnorm,
                "--json", str(json_path), "--no-progress"]
        return args + (["--data-dir", self.data_dir] if self.data_dir else [])


@dataclass
class Outcome:
    spec: RunSpec
    result: Optional[Result] = None
    error: Optional[str] = None
    log: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"settings": asdict(self.spec), "result": self.result.to_dict() if self.result else None,
                "error": self.error}


def run_one(spec: RunSpec, timeout: Optional[float] = None) -> Outcome:
    """Train in a fresh process; a failure becomes the outcome's error, never an exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        try:
            proc = subprocess.run([sys.executable, "-m", "multidev", *spec.argv(path)], capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(spec, error=f"did not finish within {timeout:.0f} s")
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not path.exists():
            errors = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            reason = errors[-1] if errors else f"exit code {proc.returncode}"
            return Outcome(spec, error=reason.removeprefix("multidev: error: "), log=lines)
        return Outcome(spec, result=Result.from_dict(json.loads(path.read_text())), log=lines)


def grid(backends: Sequence[str], device_counts: Sequence[int], **settings) -> list[RunSpec]:
    return [RunSpec(backend=b, devices=k, **settings) for b in backends for k in device_counts]


def markdown(outcomes: Sequence[Outcome]) -> str:
    rows = ["| engine | devices | batch | lr | sec/epoch | samples/s | compile s | test acc |",
            "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        s = o.spec
        if o.result is None:
            rows.append(f"| {s.backend} | {s.devices} | {s.batch_size} | {s.lr} | failed: {o.error} | | | |")
            continue
        r = o.result
        sps = sum(e.samples_per_sec for e in r.epochs) / len(r.epochs)
        rows.append(f"| {s.backend} | {s.devices} | {s.batch_size} | {s.lr} | {r.sec_per_epoch:.2f} | "
                    f"{sps:.0f} | {r.compile_seconds:.1f} | {r.test_acc:.3f} |")
    return "\n".join(rows) + "\n"


def plot_throughput(outcomes: Sequence[Outcome], path: Path) -> None:
    """Samples per second, grouped by engine, one bar per device count."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plot import save_figure

    done = [o for o in outcomes if o.result is not None]
    engines = list(dict.fromkeys(o.spec.backend for o in done))
    counts = sorted({o.spec.devices for o in done})
    width = 0.8 / max(len(counts), 1)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for j, k in enumerate(counts):
        xs, heights = [], []
        for i, engine in enumerate(engines):
            for o in done:
                if o.spec.backend == engine and o.spec.devices == k:
                    xs.append(i + (j - (len(counts) - 1) / 2) * width)
                    heights.append(sum(e.samples_per_sec for e in o.result.epochs) / len(o.result.epochs))
        bars = ax.bar(xs, heights, width, label=f"{k} device{'s' if k > 1 else ''}")
        ax.bar_label(bars, fmt="%.0f", fontsize="small")
    ax.set_xticks(range(len(engines)), engines)
    ax.set_ylabel("training samples / second")
    first = done[0].spec if done else None
    if first:
        ax.set_title(f"{first.model} on {first.dataset}: throughput")
    ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


def write_report(outcomes: Sequence[Outcome], out: Path) -> dict[str, Path]:
    """results.json, results.md, accuracy.png and throughput.png in ``out``."""
    from .plot import plot_accuracy

    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "results.json", "table": out / "results.md",
             "accuracy": out / "accuracy.png", "throughput": out / "throughput.png"}
    write_text_atomic(files["json"], json.dumps([o.to_dict() for o in outcomes], indent=2) + "\n")
    write_text_atomic(files["table"], markdown(outcomes))
    done = [o.result for o in outcomes if o.result is not None]
    if done:
        plot_accuracy(done, files["accuracy"], title=f"{done[0].model} on {done[0].dataset}: test accuracy")
        plot_throughput(outcomes, files["throughput"])
    else:
        del files["accuracy"], files["throughput"]
    return files


def compare(backends: Sequence[str] = ("torch",), devices: Sequence[int] = (1, 2), *,
            out: Optional[str | Path] = None, runs: Optional[Sequence[RunSpec]] = None, progress: bool = False,
            timeout: Optional[float] = None, **settings) -> list[Outcome]:
    """Run every (engine, device count) combination, or the given ``runs``, each in its own process."""
    specs = list(runs) if runs is not None else grid(backends, devices, **settings)
    if not specs:
        raise MultidevError("nothing to compare: name at least one engine and one device count")
    outcomes = []
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(specs), unit="run")
    for spec in specs:
        if bar is not None:
            bar.set_description(f"{spec.backend} x{spec.devices}")
        outcome = run_one(spec, timeout)
        outcomes.append(outcome)
        if bar is not None:
            bar.update()
            line = outcome.log[-1] if outcome.result else f"failed: {outcome.error}"
            bar.write(f"{spec.backend} on {spec.devices} device(s): {line}")
    if bar is not None:
        bar.close()
    if out is not None:
        write_report(outcomes, Path(out))
    return outcomes
