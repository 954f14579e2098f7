"""What ``multidev compare`` writes: the table, the JSON and the plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from multidev.comparison.runs import Outcome
from multidev.outputs.plot import plot_divergence
from multidev.outputs.result import write_text_atomic


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

    from multidev.outputs.plot import save_figure

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
    from multidev.outputs.plot import plot_accuracy

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
