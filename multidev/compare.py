"""Cross-framework comparison: the same job on several engines and device counts.

Each run is a separate ``multidev train`` process, so that one engine's
threads, JAX's device count or a crash cannot disturb another run. Every run
gets the same model, initial weights (seed), data order and split rule.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

from .divergence import Divergence, describe_float32, describe_float64, measure
from .errors import MultidevError
from .plot import plot_divergence
from .recipe import Recipe
from .result import Result, load_json, write_text_atomic
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


def _distances(o: Outcome) -> str:
    d = o.divergence
    if o.spec.dtype == "float64" and d is None:
        return "truth"
    if d is None or not d.steps:
        return ""
    return " / ".join(f"{d.at(step):.1e}" for step in (d.steps[0], min(8, d.steps[-1]), d.steps[-1])
                      if d.at(step) is not None)


def markdown(outcomes: Sequence[Outcome]) -> str:
    rows = ["| engine | devices | dtype | batch | lr | sec/epoch | samples/s | compile s | test acc | "
            "vs float64: step 1 / 8 / last | difference |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    labels = sorted({o.spec.recipe.label() for o in outcomes} - {""})
    if labels:
        rows.insert(0, f"Recipe: {'; '.join(labels)}\n")
    for o in outcomes:
        s = o.spec
        where = s.devices if s.processes == 1 else f"{s.processes} processes x {s.devices}"
        head = f"| {s.backend} | {where} | {s.dtype} | {s.batch_size} | {s.lr} |"
        if o.result is None:
            rows.append(f"{head} failed: {o.error} | | | | | |")
            continue
        r = o.result
        sps = sum(e.samples_per_sec for e in r.epochs) / len(r.epochs)
        rows.append(f"{head} {r.sec_per_epoch:.2f} | {sps:.0f} | {r.compile_seconds:.1f} | {r.test_acc:.3f} | "
                    f"{_distances(o)} | {o.verdict or ''} |")
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
    save_figure(fig, path)


def write_report(outcomes: Sequence[Outcome], out: Path) -> dict[str, Path]:
    """results.json, results.md, accuracy.png and throughput.png in ``out``."""
    from .plot import plot_accuracy

    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "results.json", "table": out / "results.md",
             "accuracy": out / "accuracy.png", "throughput": out / "throughput.png",
             "divergence": out / "divergence.png"}
    write_text_atomic(files["json"], json.dumps([o.to_dict() for o in outcomes], indent=2) + "\n")
    write_text_atomic(files["table"], markdown(outcomes))
    done = [o.result for o in outcomes if o.result is not None]
    if done:
        plot_accuracy(done, files["accuracy"], title=f"{done[0].model} on {done[0].dataset}: test accuracy")
        plot_throughput(outcomes, files["throughput"])
    else:
        del files["accuracy"], files["throughput"]
    if any(o.divergence and o.divergence.steps for o in outcomes):
        plot_divergence(outcomes, files["divergence"])
    else:
        del files["divergence"]
    return files


def compare(backends: Sequence[str] = ("torch",), devices: Sequence[int] = (1, 2), *,
            out: Optional[str | Path] = None, runs: Optional[Sequence[RunSpec]] = None, progress: bool = False,
            timeout: Optional[float] = None, truth: bool = True, float64: bool = False,
            **settings) -> list[Outcome]:
    """Run every (engine, device count) combination, or the given ``runs``, each in its own process.

    With ``truth`` each device count also runs once in float64, on the first
    engine that can, and every float32 run's parameters are measured against
    it over training (``multidev.divergence``): the first engine's float32
    run gives the scale of rounding, and each other run is called 'rounding'
    or 'beyond rounding' against it. ReLU kinks make rounding jump now and
    then, so ``float64`` also runs every other engine in float64: a float64 run
    that stays on the truth shows that the engine defines everything the same.
    """
    specs = list(runs) if runs is not None else grid(backends, devices, **settings)
    if not specs:
        raise MultidevError("nothing to compare: name at least one engine and one device count")
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(specs), unit="run")

    def run(spec: RunSpec, trace: Optional[Path]) -> Outcome:
        if bar is not None:
            bar.set_description(spec.label)
        outcome = run_one(spec, timeout, trace)
        if bar is not None:
            bar.update()
            line = outcome.log[-1] if outcome.result else f"failed: {outcome.error}"
            bar.write(f"{spec.label}: {line}")
        return outcome

    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="multidev-compare-") as tmp:
        truths: dict[int, tuple[Path, RunSpec]] = {}
        if truth:
            for k in dict.fromkeys(s.devices for s in specs if s.dtype == "float32"):
                first = next(s for s in specs if s.devices == k)
                for engine in dict.fromkeys(s.backend for s in specs):
                    spec = first.at_float64(backend=engine)
                    if bar is not None:
                        bar.total += 1
                    folder = Path(tmp) / f"truth-{k}"
                    outcome = run(spec, folder)
                    if outcome.result is not None:
                        outcomes.append(outcome)
                        truths[k] = (folder, spec)
                        break
                    shutil.rmtree(folder, ignore_errors=True)
        if float64:
            specs += [s.at_float64() for s in specs if s.dtype == "float32"
                      and s.devices in truths and s.backend != truths[s.devices][1].backend]
            if bar is not None:
                bar.total = len(specs) + len(truths)
        for i, spec in enumerate(specs):
            folder = Path(tmp) / f"run-{i}"
            outcome = run(spec, folder if spec.devices in truths else None)
            if outcome.result is not None and spec.devices in truths:
                truth_folder, truth_spec = truths[spec.devices]
                outcome.divergence = measure(truth_folder, folder, truth_spec.label)
            shutil.rmtree(folder, ignore_errors=True)
            outcomes.append(outcome)
    scales: dict[int, Outcome] = {}  # per device count, the first float32 run: the scale of rounding
    for o in outcomes:
        if o.divergence is None:
            continue
        if o.spec.dtype == "float64":
            o.verdict = describe_float64(o.divergence)
            continue
        scale = scales.setdefault(o.spec.devices, o)
        if scale is o:
            o.verdict = f"rounding scale ({o.spec.backend} float32)"
            continue
        twin = next((t for t in outcomes if t.spec == o.spec.at_float64()), None)
        o.verdict = describe_float32(o.divergence, scale.divergence, o.spec.backend,
                                     twin.divergence if twin is not None else None, twin is None)
    # An engine without float64 says so in its verdict; its failed float64 rows would only clutter the table.
    outcomes = [o for o in outcomes if not (o.spec.dtype == "float64" and o.error and "float32 only" in o.error)]
    if bar is not None:
        bar.close()
    if out is not None:
        write_report(outcomes, Path(out))
    return outcomes
