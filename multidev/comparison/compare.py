"""Cross-framework comparison: every run, its float64 truth, and the verdicts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from multidev.comparison.divergence import describe_float32, describe_float64, measure
from multidev.comparison.report import write_report
from multidev.comparison.runs import Outcome, RunSpec, grid, run_one
from multidev.errors import MultidevError


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
