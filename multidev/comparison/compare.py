"""Cross-framework comparison: every run, its float64 truth, and the verdicts."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from multidev.comparison.divergence import describe_float32, describe_float64, measure
from multidev.comparison.report import write_report
from multidev.comparison.runs import Outcome, grid, run_one
from multidev.engines.registry import installed, load_backend
from multidev.errors import MultidevError
from multidev.settings.run import Settings
from multidev.training.run import check_inputs


@dataclass
class _Runner:
    """Runs settings one at a time in their own processes, each with a trace folder under ``folder``."""

    folder: Path
    timeout: Optional[float]
    bar: Any = None
    #: per device count, the float64 truth's trace folder and settings
    truths: dict[int, tuple[Path, Settings]] = field(default_factory=dict)

    def __call__(self, spec: Settings, trace: Optional[Path]) -> Outcome:
        if self.bar is not None:
            self.bar.set_description(spec.label)
        outcome = run_one(spec, self.timeout, trace)
        if self.bar is not None:
            self.bar.update()
            line = outcome.log[-1] if outcome.result else f"failed: {outcome.error}"
            self.bar.write(f"{spec.label}: {line}")
        return outcome

    def truth(self, specs: Sequence[Settings]) -> list[Outcome]:
        """Per device count, one float64 run on the first engine that offers it."""
        found = []
        for k in dict.fromkeys(s.device_count for s in specs if s.dtype == "float32"):
            first = next(s for s in specs if s.device_count == k)
            for engine in dict.fromkeys(s.engine_name for s in specs):
                spec = first.at_float64(backend=engine)
                if self.bar is not None:
                    self.bar.total += 1
                folder = self.folder / f"truth-{k}"
                outcome = self(spec, folder)
                if outcome.result is not None:
                    found.append(outcome)
                    self.truths[k] = (folder, spec)
                    break
                shutil.rmtree(folder, ignore_errors=True)
        return found

    def measured(self, i: int, spec: Settings) -> Outcome:
        """Run ``spec``; where its device count has a truth, how far its parameters part from it."""
        folder = self.folder / f"run-{i}"
        truth = self.truths.get(spec.device_count)
        outcome = self(spec, folder if truth else None)
        if outcome.result is not None and truth:
            outcome.divergence = measure(truth[0], folder, truth[1].label, spec.dtype, spec.precision)
        shutil.rmtree(folder, ignore_errors=True)
        return outcome


def _verdicts(outcomes: list[Outcome], truths: dict[int, tuple[Path, Settings]]) -> None:
    """Each measured run: rounding, or where its difference was born and, from the same engine's float64 run
    (or the truth, where that is the engine's own), why."""
    for o in outcomes:
        if o.divergence is None:
            continue
        if o.spec.dtype == "float64":
            o.verdict = describe_float64(o.divergence)
            continue
        truth = o.spec.device_count in truths and truths[o.spec.device_count][1] == o.spec.at_float64()
        twin = next((t for t in outcomes if t.spec == o.spec.at_float64()), None)
        o.verdict = describe_float32(o.divergence, o.spec.engine_name, twin.divergence if twin is not None else None,
                                     twin is None, truth)


def _check(specs: Sequence[Settings]) -> None:
    """Every engine installed and every run's data and model readable, before the first run: a mistake is one
    line now, not a failed row per run after the others have trained."""
    for name in dict.fromkeys(s.engine_name for s in specs if isinstance(s.backend, str)):
        if name not in installed():
            load_backend(name)  # says in one line that the engine is unknown, or how to install it
    devices = max(s.device_count * s.launch.size for s in specs)
    for s in {(str(s.dataset), str(s.model)): s for s in specs}.values():
        check_inputs(s, devices)


def compare(backends: Sequence[str] = ("torch",), devices: Sequence[int] = (1, 2), *,
            out: Optional[str | Path] = None, runs: Optional[Sequence[Settings]] = None, progress: bool = False,
            timeout: Optional[float] = None, truth: bool = True, float64: bool = False,
            settings: Optional[Settings] = None, **kwargs: Any) -> list[Outcome]:
    """Run every (engine, device count) combination, or the given ``runs``, each in its own process.

    ``backends`` and ``devices`` (counts) make the grid; every run takes
    ``settings`` (a :class:`multidev.Settings`) with ``kwargs`` replacing
    its fields, or ``runs`` gives the runs whole. ``out`` is the folder for
    results.json, results.md and the plots; ``timeout`` the seconds after
    which a run counts as failed; ``progress`` shows a bar over the runs.

    With ``truth`` each device count also runs once in float64, on the first
    engine that can, and every float32 run's parameters are measured against
    it over training (``multidev.comparison.divergence``): a run is
    'rounding' while it stays within float32's reach of the truth, and
    otherwise the verdict says at which step and in which array its
    difference was born. ReLU kinks make rounding jump now and then, so
    ``float64`` also runs every other engine in float64: a float64 run that
    stays on the truth shows that the engine defines everything the same,
    and so that a float32 difference was born of rounding.
    """
    if isinstance(backends, str):  # "torch,jax", as the command line writes them
        backends = [b.strip() for b in backends.split(",") if b.strip()]
    if timeout is not None and not timeout > 0:
        raise MultidevError(f"timeout must be a positive number of seconds, got {timeout!r}")
    base = (settings or Settings()).replace(**kwargs)
    specs = list(runs) if runs is not None else grid(backends, devices, base)
    if not specs:
        raise MultidevError("nothing to compare: name at least one engine and one device count")
    _check(specs)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(specs), unit="run")
    with tempfile.TemporaryDirectory(prefix="multidev-compare-") as tmp:
        specs = [s.shareable(Path(tmp)) for s in specs]  # each run is a process: Python data reach it as files
        runner = _Runner(Path(tmp), timeout, bar)
        outcomes = runner.truth(specs) if truth else []
        if float64:
            specs += [s.at_float64() for s in specs if s.dtype == "float32" and s.device_count in runner.truths
                      and s.engine_name != runner.truths[s.device_count][1].engine_name]
            if bar is not None:
                bar.total = len(specs) + len(runner.truths)
        outcomes += [runner.measured(i, spec) for i, spec in enumerate(specs)]
        # while a data set made in Python is still on disk: its twins' settings check its path
        _verdicts(outcomes, runner.truths)
    # An engine without float64 says so in its verdict; its failed float64 rows would only clutter the table.
    outcomes = [o for o in outcomes if not (o.spec.dtype == "float64" and o.error and "float32 only" in o.error)]
    if bar is not None:
        bar.close()
    if out is not None:
        write_report(outcomes, Path(out))
    return outcomes
